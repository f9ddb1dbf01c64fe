//! Ranks on their own cores (`HCCL_RS_CPU_AFFINITY`): the setting, the
//! pure choice of a rank's CPU within the mask it inherited, and the
//! pinning done at communicator init.
//!
//! As NCCL does, the choice is always *within* the CPU mask the launcher
//! gave (the calling thread's mask at init): a rank is never moved to a CPU
//! it was not allowed on. In `auto` mode a rank is pinned only when that
//! mask has a CPU for every rank on the host; a smaller mask (e.g.
//! `mpirun --bind-to core`) is the launcher's binding and is kept.
//!
//! What is pinned: for a process rank, the thread that creates the
//! communicator (the one that drives ops in op-base mode) and the device's
//! worker thread ([`hccl_platform::ExecMode::Worker`]); with
//! [`crate::CommConfig::pin_creating_thread`] false, the worker only, the
//! CPU being kept for [`crate::Communicator::pin_calling_thread`] (the
//! Python package pins the thread that first launches an op). For threads-as-ranks
//! ([`crate::Communicator::init_all`], [`crate::InProcGroup`]) the rank
//! threads are the user's, so only the worker thread hccl-rs creates is
//! pinned. Link threads (TCP) stay in the inherited mask: they mostly
//! block in the kernel.

use hccl_platform::{Device, HcclError, Result};
use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::unistd::Pid;

/// Where ranks run (`HCCL_RS_CPU_AFFINITY`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum CpuAffinity {
    /// Local rank i gets the i-th CPU of the inherited mask, when that mask
    /// has at least as many CPUs as ranks on the host; else nothing is
    /// pinned (the default).
    #[default]
    Auto,
    /// Never pin.
    Off,
    /// Local rank i gets `list[i % len]`; every CPU must be in the
    /// inherited mask.
    List(Vec<usize>),
}

impl CpuAffinity {
    /// Parses `auto`, `off` or a comma-separated list of CPU ids and
    /// ranges (`0-3,8`); a bad value is a parameter error naming the
    /// variable.
    pub fn parse(value: &str) -> Result<CpuAffinity> {
        let bad = |why: &str| {
            HcclError::para(format!(
                "environment variable HCCL_RS_CPU_AFFINITY='{value}' is invalid: {why}"
            ))
        };
        match value.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => return Ok(CpuAffinity::Auto),
            "off" | "none" => return Ok(CpuAffinity::Off),
            _ => {}
        }
        let cpu = |s: &str| {
            s.trim()
                .parse::<usize>()
                .ok()
                .filter(|c| *c < CpuSet::count())
                .ok_or_else(|| bad(&format!("'{}' is not a CPU id", s.trim())))
        };
        let mut list = Vec::new();
        for part in value.split(',') {
            match part.split_once('-') {
                Some((a, b)) => {
                    let (a, b) = (cpu(a)?, cpu(b)?);
                    if a > b {
                        return Err(bad(&format!("range '{}' is empty", part.trim())));
                    }
                    list.extend(a..=b);
                }
                None => list.push(cpu(part)?),
            }
        }
        Ok(CpuAffinity::List(list))
    }
}

/// The CPU local rank `local` of `ranks_on_host` should run on, given the
/// inherited `mask` (sorted CPU ids): `None` = leave it where it is.
/// A listed CPU outside the mask is a parameter error (never widen).
pub(crate) fn choose(
    setting: &CpuAffinity,
    mask: &[usize],
    local: u32,
    ranks_on_host: u32,
) -> Result<Option<usize>> {
    match setting {
        CpuAffinity::Off => Ok(None),
        CpuAffinity::Auto => {
            if mask.len() < ranks_on_host as usize {
                return Ok(None);
            }
            Ok(mask.get(local as usize).copied())
        }
        CpuAffinity::List(list) => {
            if list.is_empty() {
                return Ok(None);
            }
            let cpu = list[local as usize % list.len()];
            if !mask.contains(&cpu) {
                return Err(HcclError::para(format!(
                    "HCCL_RS_CPU_AFFINITY names CPU {cpu} for local rank {local}, but the process may only run on CPUs {mask:?} (the launcher's mask is never widened)"
                )));
            }
            Ok(Some(cpu))
        }
    }
}

/// The CPUs the calling thread may run on, ascending.
pub(crate) fn current_mask() -> Result<Vec<usize>> {
    let set = sched_getaffinity(Pid::from_raw(0))
        .map_err(|e| HcclError::internal(format!("sched_getaffinity: {e}")))?;
    Ok((0..CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .collect())
}

fn pin(tid: i32, cpu: usize) -> Result<()> {
    let mut set = CpuSet::new();
    set.set(cpu)
        .map_err(|e| HcclError::para(format!("CPU {cpu}: {e}")))?;
    sched_setaffinity(Pid::from_raw(tid), &set)
        .map_err(|e| HcclError::internal(format!("sched_setaffinity(CPU {cpu}): {e}")))
}

/// Pins the calling thread on `cpu` (a CPU [`pin_rank`] chose).
pub(crate) fn pin_current(cpu: usize) -> Result<()> {
    pin(0, cpu)
}

/// Pins rank `rank` (local index `local` of `ranks_on_host`) per
/// `setting`: its device's worker thread, and the calling thread too when
/// `caller` (process ranks). Returns the CPU chosen (None: not pinned).
/// Logs the choice at debug.
pub(crate) fn pin_rank(
    setting: &CpuAffinity,
    rank: u32,
    local: u32,
    ranks_on_host: u32,
    device: &Device,
    caller: bool,
) -> Result<Option<usize>> {
    if *setting == CpuAffinity::Off {
        tracing::debug!(rank, local, "CPU affinity off: not pinned");
        return Ok(None);
    }
    let mask = current_mask()?;
    let Some(cpu) = choose(setting, &mask, local, ranks_on_host).map_err(|e| e.rank(rank))? else {
        tracing::debug!(
            rank,
            local,
            ranks_on_host,
            ?mask,
            "CPU affinity: inherited mask has fewer CPUs than ranks on the host; keeping it"
        );
        return Ok(None);
    };
    if caller {
        pin(0, cpu)?;
    }
    if let Some(tid) = device.worker_thread_id() {
        pin(tid, cpu)?;
    }
    tracing::debug!(
        rank,
        local,
        ranks_on_host,
        ?mask,
        cpu,
        caller,
        worker = device.worker_thread_id().is_some(),
        "CPU affinity: rank pinned"
    );
    Ok(Some(cpu))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hccl_platform::HcclResult;

    #[test]
    fn parses_settings() {
        assert_eq!(CpuAffinity::parse("auto").unwrap(), CpuAffinity::Auto);
        assert_eq!(CpuAffinity::parse(" AUTO ").unwrap(), CpuAffinity::Auto);
        assert_eq!(CpuAffinity::parse("").unwrap(), CpuAffinity::Auto);
        assert_eq!(CpuAffinity::parse("off").unwrap(), CpuAffinity::Off);
        assert_eq!(CpuAffinity::parse("3").unwrap(), CpuAffinity::List(vec![3]));
        assert_eq!(
            CpuAffinity::parse("0-3, 8,10-11").unwrap(),
            CpuAffinity::List(vec![0, 1, 2, 3, 8, 10, 11])
        );
    }

    #[test]
    fn bad_settings_are_typed_errors() {
        for (v, why) in [
            ("fast", "'fast' is not a CPU id"),
            ("1,,2", "'' is not a CPU id"),
            ("-1", "'' is not a CPU id"),
            ("3-1", "range '3-1' is empty"),
            ("0-x", "'x' is not a CPU id"),
            ("99999", "'99999' is not a CPU id"),
        ] {
            let e = CpuAffinity::parse(v).unwrap_err();
            assert_eq!(e.code(), HcclResult::EPara);
            let msg = e.to_string();
            assert!(
                msg.contains(&format!("HCCL_RS_CPU_AFFINITY='{v}'")),
                "{msg}"
            );
            assert!(msg.contains(why), "{msg}");
        }
    }

    #[test]
    fn auto_takes_the_ith_cpu_of_a_big_enough_mask() {
        let mask = [2, 3, 5, 7];
        assert_eq!(choose(&CpuAffinity::Auto, &mask, 0, 4).unwrap(), Some(2));
        assert_eq!(choose(&CpuAffinity::Auto, &mask, 2, 4).unwrap(), Some(5));
        assert_eq!(choose(&CpuAffinity::Auto, &mask, 1, 2).unwrap(), Some(3));
    }

    #[test]
    fn auto_keeps_a_mask_smaller_than_the_ranks() {
        // e.g. mpirun --bind-to core: one CPU for this rank of 4
        assert_eq!(choose(&CpuAffinity::Auto, &[6], 2, 4).unwrap(), None);
        assert_eq!(choose(&CpuAffinity::Auto, &[0, 1], 0, 3).unwrap(), None);
    }

    #[test]
    fn off_never_pins() {
        assert_eq!(
            choose(&CpuAffinity::Off, &[0, 1, 2, 3], 1, 2).unwrap(),
            None
        );
    }

    #[test]
    fn list_wraps_and_stays_within_the_mask() {
        let s = CpuAffinity::List(vec![4, 6]);
        let mask = [4, 5, 6, 7];
        assert_eq!(choose(&s, &mask, 0, 4).unwrap(), Some(4));
        assert_eq!(choose(&s, &mask, 1, 4).unwrap(), Some(6));
        assert_eq!(choose(&s, &mask, 2, 4).unwrap(), Some(4));
        let e = choose(&CpuAffinity::List(vec![1]), &mask, 0, 1).unwrap_err();
        assert_eq!(e.code(), HcclResult::EPara);
        assert!(e.to_string().contains("CPU 1"), "{e}");
        assert!(e.to_string().contains("never widened"), "{e}");
    }
}
