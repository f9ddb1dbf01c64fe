//! Rank and size from the launchers people use.
//!
//! | launcher | rank | size | local rank |
//! |---|---|---|---|
//! | torchrun (and anything torch-style) | `RANK` | `WORLD_SIZE` | `LOCAL_RANK` |
//! | Open MPI `mpirun` | `OMPI_COMM_WORLD_RANK` | `OMPI_COMM_WORLD_SIZE` | `OMPI_COMM_WORLD_LOCAL_RANK` |
//! | MPICH / Hydra | `PMI_RANK` | `PMI_SIZE` | `MPI_LOCALRANKID` |
//! | Slurm `srun` | `SLURM_PROCID` | `SLURM_NTASKS` | `SLURM_LOCALID` |
//!
//! The rendezvous point is `HCCL_ROOT_ADDR` (`ip:port`, or `ip` with
//! `HCCL_IF_BASE_PORT`), else `MASTER_ADDR` with `MASTER_PORT` (or
//! `HCCL_IF_BASE_PORT`), else a shared file `HCCL_RS_ROOT_FILE` where rank
//! 0 writes its root info for the others to read.

use crate::config::EnvSource;
use hccl_platform::{HcclError, Result};
use std::net::{SocketAddr, ToSocketAddrs};

/// Where the ranks meet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Rendezvous {
    /// Rank 0 serves at this address; everyone connects to it.
    Addr(SocketAddr),
    /// Rank 0 writes its root info to this file; the others wait for it.
    File(String),
}

/// What the launcher told this process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LaunchInfo {
    /// Which launcher's variables were found.
    pub launcher: &'static str,
    /// This rank.
    pub rank: u32,
    /// Ranks in the job.
    pub size: u32,
    /// Rank on this host, when the launcher says.
    pub local_rank: Option<u32>,
    /// Where to meet.
    pub rendezvous: Rendezvous,
}

const STYLES: &[(&str, &str, &str, &str)] = &[
    ("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"),
    (
        "Open MPI",
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK",
    ),
    ("MPICH/PMI", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
    ("Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
];

fn num(env: &(impl EnvSource + ?Sized), var: &str) -> Result<Option<u32>> {
    match env.get(var) {
        None => Ok(None),
        Some(v) => v.trim().parse().map(Some).map_err(|_| {
            HcclError::para(format!(
                "environment variable {var}='{v}' is invalid: expected a non-negative integer"
            ))
        }),
    }
}

fn resolve(var: &str, host: &str, port: u16) -> Result<SocketAddr> {
    (host, port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| {
            HcclError::para(format!(
                "environment variable {var}='{host}' does not resolve to an address"
            ))
        })
}

/// What a launcher told this process: its rank in the launcher's job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchedAs {
    /// Which launcher's variables were found (`Open MPI`, `Slurm`,
    /// `MPICH/PMI`, `torchrun`).
    pub launcher: &'static str,
    /// This process's rank.
    pub rank: u32,
    /// Ranks in the job.
    pub size: u32,
    /// Rank on this host, when the launcher says.
    pub local_rank: Option<u32>,
}

/// Whether this process is a rank of a launcher's job, from the same
/// variables `init_from_env` reads: `None` when no launcher's variables are
/// set; an error when they are set but malformed, or no rendezvous
/// (`HCCL_ROOT_ADDR`, `MASTER_ADDR`, `HCCL_RS_ROOT_FILE`) is given.
pub fn launched_as() -> Result<Option<LaunchedAs>> {
    Ok(detect(&crate::config::ProcessEnv)?.map(|l| LaunchedAs {
        launcher: l.launcher,
        rank: l.rank,
        size: l.size,
        local_rank: l.local_rank,
    }))
}

/// Reads the launcher environment; `None` if no launcher's variables are set.
pub(crate) fn detect(env: &(impl EnvSource + ?Sized)) -> Result<Option<LaunchInfo>> {
    for &(launcher, rank_var, size_var, local_var) in STYLES {
        let (Some(rank), Some(size)) = (num(env, rank_var)?, num(env, size_var)?) else {
            continue;
        };
        if size == 0 || rank >= size {
            return Err(HcclError::para(format!(
                "{rank_var}={rank} is out of range for {size_var}={size}"
            )));
        }
        let base_port = match num(env, "HCCL_IF_BASE_PORT")? {
            Some(p) if p <= u16::MAX as u32 => p as u16,
            Some(p) => {
                return Err(HcclError::para(format!(
                    "environment variable HCCL_IF_BASE_PORT='{p}' is invalid: not a port"
                )))
            }
            None => 60000,
        };
        let rendezvous = if let Some(v) = env.get("HCCL_ROOT_ADDR") {
            match v.parse::<SocketAddr>() {
                Ok(a) => Rendezvous::Addr(a),
                Err(_) => Rendezvous::Addr(resolve("HCCL_ROOT_ADDR", v.trim(), base_port)?),
            }
        } else if let Some(host) = env.get("MASTER_ADDR") {
            let port = match num(env, "MASTER_PORT")? {
                Some(p) if p <= u16::MAX as u32 => p as u16,
                Some(p) => {
                    return Err(HcclError::para(format!(
                        "environment variable MASTER_PORT='{p}' is invalid: not a port"
                    )))
                }
                None => base_port,
            };
            Rendezvous::Addr(resolve("MASTER_ADDR", host.trim(), port)?)
        } else if let Some(path) = env.get("HCCL_RS_ROOT_FILE") {
            Rendezvous::File(path)
        } else {
            return Err(HcclError::para(format!(
                "{launcher} variables found ({rank_var}, {size_var}) but no rendezvous: set HCCL_ROOT_ADDR, MASTER_ADDR or HCCL_RS_ROOT_FILE"
            )));
        };
        return Ok(Some(LaunchInfo {
            launcher,
            rank,
            size,
            local_rank: num(env, local_var)?,
            rendezvous,
        }));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_style() {
        let cases: [&[(&str, &str)]; 4] = [
            &[
                ("RANK", "2"),
                ("WORLD_SIZE", "4"),
                ("LOCAL_RANK", "0"),
                ("MASTER_ADDR", "127.0.0.1"),
                ("MASTER_PORT", "29500"),
            ],
            &[
                ("OMPI_COMM_WORLD_RANK", "2"),
                ("OMPI_COMM_WORLD_SIZE", "4"),
                ("HCCL_ROOT_ADDR", "127.0.0.1:29500"),
            ],
            &[
                ("PMI_RANK", "2"),
                ("PMI_SIZE", "4"),
                ("HCCL_ROOT_ADDR", "127.0.0.1"),
                ("HCCL_IF_BASE_PORT", "29500"),
            ],
            &[
                ("SLURM_PROCID", "2"),
                ("SLURM_NTASKS", "4"),
                ("SLURM_LOCALID", "1"),
                ("HCCL_RS_ROOT_FILE", "/tmp/x"),
            ],
        ];
        for (i, env) in cases.iter().enumerate() {
            let l = detect(*env).unwrap().unwrap();
            assert_eq!((l.rank, l.size), (2, 4), "{}", l.launcher);
            if i < 3 {
                assert_eq!(
                    l.rendezvous,
                    Rendezvous::Addr("127.0.0.1:29500".parse().unwrap()),
                    "{}",
                    l.launcher
                );
            } else {
                assert_eq!(l.rendezvous, Rendezvous::File("/tmp/x".into()));
                assert_eq!(l.local_rank, Some(1));
            }
        }
        assert!(detect(&[("FOO", "1")][..]).unwrap().is_none());
    }

    #[test]
    fn bad_values_are_named() {
        let e = detect(&[("RANK", "x"), ("WORLD_SIZE", "2")][..]).unwrap_err();
        assert!(e.to_string().contains("RANK='x' is invalid"), "{e}");
        let e = detect(
            &[
                ("RANK", "2"),
                ("WORLD_SIZE", "2"),
                ("MASTER_ADDR", "127.0.0.1"),
            ][..],
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("RANK=2 is out of range for WORLD_SIZE=2"),
            "{e}"
        );
        let e = detect(&[("RANK", "0"), ("WORLD_SIZE", "2")][..]).unwrap_err();
        assert!(e.to_string().contains("no rendezvous"), "{e}");
    }
}
