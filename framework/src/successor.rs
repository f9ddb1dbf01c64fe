//! Shrink, agreement and grow for ranks that are threads of one process
//! (an [`InProcGroup`]): the ranks meet in the group's table of successor
//! groups instead of over a control plane. The first rank to arrive at a
//! shrink, agreement or grow decides it (the survivors, the lost set, the
//! new size) and later arrivals either adopt its decision or, when they
//! were told otherwise, get an error saying how they disagree — one
//! decider in shared memory is the agreement.

use crate::bootstrap::root_info::{RootInfo, HCCL_ROOT_INFO_BYTES};
use crate::communicator::InProcGroup;
use crate::successor_table::Decision;
use crate::{CommConfig, Communicator};
use hccl_platform::{HcclError, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// In-process grow ids: a marker, then the id's number in [`GROWING`].
const GROW_MAGIC: &[u8; 16] = b"hccl-rs:inproc:g";

/// A grow id made in this process.
struct Growing {
    token: u64,
    /// The grown group, once the maker's `grow` made it, and how many new
    /// ranks are still to join it (the entry goes when none is).
    group: Option<(Arc<InProcGroup>, u32)>,
}

/// Grow ids made in this process and not used up.
static GROWING: Mutex<Vec<Growing>> = Mutex::new(Vec::new());
static GROWING_CHANGED: Condvar = Condvar::new();
static NEXT_GROW: AtomicU64 = AtomicU64::new(1);

fn grow_token(id: &RootInfo) -> Option<u64> {
    (id.0[..16] == GROW_MAGIC[..]).then(|| u64::from_le_bytes(id.0[16..24].try_into().expect("8")))
}

/// Declared hosts of `ranks` (old numbers), renumbered 0.. without gaps in
/// their order; `None` when the group declares none.
fn hosts_of(group: &InProcGroup, ranks: &[u32]) -> Option<Vec<u32>> {
    let hosts = group.declared_hosts()?;
    let mut seen: Vec<u32> = Vec::new();
    Some(
        ranks
            .iter()
            .map(|&r| {
                let h = hosts[r as usize];
                match seen.iter().position(|&s| s == h) {
                    Some(i) => i as u32,
                    None => {
                        seen.push(h);
                        seen.len() as u32 - 1
                    }
                }
            })
            .collect(),
    )
}

fn new_group(hosts: Option<Vec<u32>>, size: u32, config: CommConfig) -> Result<Arc<InProcGroup>> {
    match hosts {
        Some(h) => InProcGroup::on_hosts(h, config),
        None => InProcGroup::new(size, config),
    }
}

impl Communicator {
    /// [`Communicator::shrink`] for threads as ranks: the first survivor
    /// to arrive makes the new group; the others join it, or get an error
    /// if they were told other exclusions.
    pub(crate) fn shrink_threads(
        &self,
        group: &Arc<InProcGroup>,
        survivors: Vec<u32>,
        epoch: u64,
        config: CommConfig,
    ) -> Result<Communicator> {
        let key = format!("shrink/{epoch}");
        let d = group.successors.decide(&key, || {
            let hosts = hosts_of(group, &survivors);
            let g = new_group(hosts, survivors.len() as u32, config)?;
            Ok(Decision::Shrink(survivors.clone(), g))
        })?;
        let Decision::Shrink(theirs, g) = d else {
            return Err(HcclError::internal(format!("step {key} is not a shrink")));
        };
        if theirs != survivors {
            return Err(HcclError::para(format!(
                "the survivors disagree on who is excluded: the first to shrink keeps {theirs:?}, this rank {survivors:?}"
            )));
        }
        let new_rank = survivors
            .iter()
            .position(|&r| r == self.rank())
            .expect("not excluded") as u32;
        let shrunk = g.join(new_rank)?;
        self.carry_registrations(&shrunk, |q| {
            survivors.iter().position(|&s| s == q).map(|i| i as u32)
        })?;
        Ok(shrunk)
    }

    /// [`Communicator::agree_lost`] for threads as ranks: a rank is lost
    /// when its communicator is gone (destroyed, or its thread ended);
    /// the first rank to ask decides the set for this agreement and every
    /// later rank gets the same.
    pub(crate) fn agree_lost_threads(
        &self,
        group: &Arc<InProcGroup>,
        epoch: u64,
    ) -> Result<Vec<u32>> {
        let d = group.successors.decide(&format!("agree/{epoch}"), || {
            Ok(Decision::Lost(group.gone_ranks()))
        })?;
        match d {
            Decision::Lost(l) => Ok(l),
            other => Err(HcclError::internal(format!(
                "agreement {epoch} holds {other:?}"
            ))),
        }
    }

    /// [`Communicator::grow_id`] for threads as ranks: an id that names
    /// the grown group in this process.
    pub(crate) fn grow_id_threads() -> RootInfo {
        let n = NEXT_GROW.fetch_add(1, Ordering::Relaxed);
        GROWING
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Growing {
                token: n,
                group: None,
            });
        let mut bytes = [0u8; HCCL_ROOT_INFO_BYTES];
        bytes[..16].copy_from_slice(GROW_MAGIC);
        bytes[16..24].copy_from_slice(&n.to_le_bytes());
        RootInfo(bytes)
    }

    /// [`Communicator::grow`] for threads as ranks: the member with the
    /// id makes the grown group (members keep their ranks and declared
    /// hosts; the new ranks are declared on one more host), publishes it
    /// under the id for the new ranks and under this step for the other
    /// members, and every member joins it.
    pub(crate) fn grow_threads(
        &self,
        group: &Arc<InProcGroup>,
        n_ranks: u32,
        id: Option<&RootInfo>,
        epoch: u64,
        config: CommConfig,
    ) -> Result<Communicator> {
        let key = format!("grow/{epoch}");
        let connect = config.connect_timeout;
        let d = match id {
            Some(id) => {
                let token = grow_token(id).ok_or_else(|| {
                    HcclError::para("the grow id was not made by a communicator of threads of this process (grow_id)")
                })?;
                group.successors.decide(&key, || {
                    let hosts = group.declared_hosts().map(|h| {
                        let extra = h.iter().max().map_or(0, |m| m + 1);
                        let mut all = h.to_vec();
                        all.resize(n_ranks as usize, extra);
                        all
                    });
                    let g = new_group(hosts, n_ranks, config)?;
                    let mut growing = GROWING.lock().unwrap_or_else(|p| p.into_inner());
                    let slot = growing
                        .iter_mut()
                        .find(|e| e.token == token && e.group.is_none())
                        .ok_or_else(|| {
                            HcclError::para("the grow id was used already (ids are single-use)")
                        })?;
                    slot.group = Some((g.clone(), n_ranks - self.size()));
                    GROWING_CHANGED.notify_all();
                    Ok(Decision::Grow(g))
                })?
            }
            None => group.successors.await_decision(
                &key,
                connect,
                "the member with the grow id to grow",
            )?,
        };
        let Decision::Grow(g) = d else {
            return Err(HcclError::internal(format!("step {key} is not a grow")));
        };
        if g.size() != n_ranks {
            return Err(HcclError::para(format!(
                "the members disagree on the new size: {} and {n_ranks}",
                g.size()
            )));
        }
        let grown = g.join(self.rank())?;
        self.carry_registrations(&grown, Some)?;
        Ok(grown)
    }
}

/// [`Communicator::join_grown`] for an id of [`Communicator::grow_id`]
/// made by threads of this process; `None` if `id` is not one.
pub(crate) fn join_grown_threads(
    n_ranks: u32,
    id: &RootInfo,
    rank: u32,
    connect: Duration,
) -> Option<Result<Communicator>> {
    let token = grow_token(id)?;
    let deadline = Instant::now() + connect;
    let mut growing = GROWING.lock().unwrap_or_else(|p| p.into_inner());
    let g = loop {
        match growing.iter().position(|e| e.token == token) {
            None => {
                return Some(Err(HcclError::para(
                    "the grow id is unknown to this process (used up, or made elsewhere)",
                )))
            }
            Some(i) => {
                if let Some((g, left)) = &mut growing[i].group {
                    let g = g.clone();
                    *left = left.saturating_sub(1);
                    if *left == 0 {
                        growing.remove(i);
                    }
                    break g;
                }
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Some(Err(HcclError::timeout(format!(
                "waited {connect:?} (HCCL_CONNECT_TIMEOUT) for the members to grow"
            ))));
        }
        growing = GROWING_CHANGED
            .wait_timeout(growing, left)
            .unwrap_or_else(|p| p.into_inner())
            .0;
    };
    drop(growing);
    if g.size() != n_ranks {
        return Some(Err(HcclError::para(format!(
            "joining a grown communicator of {n_ranks} ranks: the members grow to {}",
            g.size()
        ))));
    }
    if rank >= n_ranks {
        return Some(Err(HcclError::para(format!(
            "rank {rank} is out of range for a communicator of {n_ranks} ranks"
        ))));
    }
    Some(g.join(rank))
}
