//! Revoking a communicator (NCCL's `ncclCommRevoke`, ULFM's
//! `MPI_Comm_revoke`): any rank may revoke; the in-flight ops of every
//! rank then end promptly with a "revoked" error, and later ops are
//! refused (the communicator is kept for status calls and destruction).
//!
//! How it spreads: between processes over the control plane
//! ([`crate::control`]), by flooding — every rank that learns of the
//! revocation first passes it on to every other rank, then fails its own
//! in-flight ops ([`hccl_platform::Device::fail_all`]) — so it reaches
//! everyone even when its origin dies right after sending it to one
//! peer. Between the threads of one process ([`crate::InProcGroup`]) the
//! revoking thread marks every sibling directly.

use crate::control::{Control, Handler, Msg};
use hccl_platform::{Device, HcclError};
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// One rank's revocation state.
#[derive(Debug)]
pub(crate) struct Revocation {
    rank: u32,
    device: Device,
    /// `(origin, reason)` once revoked.
    revoked: OnceLock<(u32, String)>,
}

impl Revocation {
    pub(crate) fn new(rank: u32, device: Device) -> Arc<Revocation> {
        Arc::new(Revocation {
            rank,
            device,
            revoked: OnceLock::new(),
        })
    }

    /// `(origin, reason)` if revoked.
    pub(crate) fn get(&self) -> Option<&(u32, String)> {
        self.revoked.get()
    }

    /// The error of an op ended or refused by the revocation.
    pub(crate) fn error(origin: u32, reason: &str) -> HcclError {
        HcclError::suspending(format!("revoked by rank {origin}: {reason}"))
    }

    /// Marks the communicator revoked by `origin`; `false` if it already
    /// was (then nothing more is to be done).
    fn mark(&self, origin: u32, reason: &str) -> bool {
        if self.revoked.set((origin, reason.to_owned())).is_err() {
            return false;
        }
        tracing::warn!(rank = self.rank, origin, reason, "communicator revoked");
        true
    }

    /// Ends this rank's in-flight ops (and any queued later).
    fn end_ops(&self, origin: u32, reason: &str) {
        self.device
            .fail_all(Self::error(origin, reason).rank(self.rank));
    }
}

/// The revocations of the ranks of one process's group, by rank.
#[derive(Debug, Default)]
pub(crate) struct Siblings(Mutex<Vec<Weak<Revocation>>>);

impl Siblings {
    /// Enrolls `rank`'s revocation.
    pub(crate) fn enroll(&self, rank: u32, r: &Arc<Revocation>) {
        let mut v = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if v.len() <= rank as usize {
            v.resize(rank as usize + 1, Weak::new());
        }
        v[rank as usize] = Arc::downgrade(r);
    }

    /// Ranks below `size` whose communicator is gone (or never enrolled).
    pub(crate) fn gone(&self, size: u32) -> Vec<u32> {
        let v = self.0.lock().unwrap_or_else(|p| p.into_inner());
        (0..size)
            .filter(|&r| v.get(r as usize).is_none_or(|w| w.strong_count() == 0))
            .collect()
    }

    fn all(&self) -> Vec<Arc<Revocation>> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter_map(Weak::upgrade)
            .collect()
    }
}

/// How a revocation reaches the other ranks.
#[derive(Debug, Default)]
pub(crate) enum Spread {
    /// Processes: the control plane (kept alive here).
    Control(crate::control::ControlPlane),
    /// Threads of one process.
    Siblings(Arc<Siblings>),
    /// Nothing to spread to (one rank; or no control plane, as in a
    /// communicator from a rank table).
    #[default]
    Alone,
}

impl Spread {
    /// Revokes: marks `mine`, tells every other rank, ends this rank's
    /// in-flight ops. `false` if already revoked.
    pub(crate) fn revoke(&self, mine: &Revocation, reason: &str) -> bool {
        let origin = mine.rank;
        if !mine.mark(origin, reason) {
            return false;
        }
        match self {
            Spread::Control(plane) => plane.control().send_all(
                None,
                &Msg::Revoke {
                    origin,
                    reason: reason.to_owned(),
                },
            ),
            Spread::Siblings(s) => {
                for sib in s.all() {
                    if !std::ptr::eq(sib.as_ref(), mine) && sib.mark(origin, reason) {
                        sib.end_ops(origin, reason);
                    }
                }
            }
            Spread::Alone => {}
        }
        mine.end_ops(origin, reason);
        true
    }
}

/// The control plane's handler for revocations reaching `mine`: pass it
/// on first (so it spreads even if this rank dies next), then end the
/// in-flight ops.
pub(crate) fn handler(mine: &Arc<Revocation>) -> Handler {
    let mine = mine.clone();
    Arc::new(move |control: &Control, from: u32, msg: Msg| {
        if let Msg::Revoke { origin, reason } = msg {
            if mine.mark(origin, &reason) {
                control.send_all(
                    Some(from),
                    &Msg::Revoke {
                        origin,
                        reason: reason.clone(),
                    },
                );
                mine.end_ops(origin, &reason);
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::{ControlListener, ControlPlane};
    use hccl_platform::{DeviceConfig, HcclResult};
    use std::time::{Duration, Instant};

    #[test]
    fn a_revocation_sent_to_one_peer_reaches_every_rank() {
        let n = 4u32;
        let listeners: Vec<_> = (0..n)
            .map(|_| ControlListener::bind([127, 0, 0, 1].into()).unwrap())
            .collect();
        let addrs: Vec<_> = listeners.iter().map(|l| Some(l.addr().unwrap())).collect();
        let planes: Vec<_> = listeners
            .into_iter()
            .enumerate()
            .map(|(r, l)| {
                ControlPlane::start(l, r as u32, [9; 16], addrs.clone(), Duration::from_secs(5))
                    .unwrap()
            })
            .collect();
        let revs: Vec<_> = (0..n)
            .map(|r| Revocation::new(r, Device::new(r, DeviceConfig::default())))
            .collect();
        for (p, r) in planes.iter().zip(&revs) {
            p.control().set_handler(handler(r));
        }
        // rank 3 revokes and dies after telling rank 0 alone
        assert!(revs[3].mark(3, "rank 3 gave up"));
        planes[3]
            .control()
            .send(
                0,
                &Msg::Revoke {
                    origin: 3,
                    reason: "rank 3 gave up".into(),
                },
            )
            .unwrap();
        let mut planes = planes;
        drop(planes.pop());
        let t = Instant::now();
        // each rank marks, passes it on, then ends its ops: wait for the last
        while !revs[..3]
            .iter()
            .all(|r| r.get().is_some() && r.device.failed_all().is_some())
        {
            assert!(t.elapsed() < Duration::from_secs(5), "not every rank heard");
            std::thread::sleep(Duration::from_millis(5));
        }
        for r in &revs[..3] {
            assert_eq!(r.get(), Some(&(3, "rank 3 gave up".to_owned())));
            let e = r.device.failed_all().expect("in-flight ops ended");
            assert_eq!(e.code(), HcclResult::ESuspending);
            assert!(
                e.message().starts_with("revoked by rank 3: rank 3 gave up"),
                "{e}"
            );
        }
    }
}
