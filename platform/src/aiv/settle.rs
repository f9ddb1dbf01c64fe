//! The checks a synchronize waits for: a rank that needs no data from some
//! peers (the root of a Broadcast, a non-root of a Reduce) completes its
//! kernel without waiting for their entries, and checks their arguments
//! later ([`catch_up`]). Its next kernel on the boards catches up; if there
//! is none, the synchronize of the stream queues an [`AivCheck`] (through
//! the stream's [`Settle`] hook), which waits for the peers' entries like
//! any kernel — with the same liveness checks and `HCCL_EXEC_TIMEOUT` —
//! and fails the synchronize with HCCL's inconsistency error if a peer
//! issued a different op.

use super::board::AivBoards;
use super::check::catch_up;
use super::kernel::{pending_on, wake_if_completed};
use crate::error::{HcclError, Result};
use crate::link::Link;
use crate::stream::{Kernel, Settle};
use crate::sync::{Arc, Weak};
use std::task::Poll;

/// A rank's boards as a stream's [`Settle`]: something is left to settle
/// while this rank has published an op whose peers' entries it has not
/// all checked. Holds the boards weakly: a communicator destroyed leaves
/// nothing to check, and a stream does not keep its links alive.
#[derive(Debug)]
pub(super) struct AivSettle(pub(super) Weak<AivBoards>);

impl Settle for AivSettle {
    fn settle_task(&self) -> Option<Box<dyn Kernel>> {
        let boards = self.0.upgrade()?;
        (boards.completed() < boards.own.last_seq())
            .then(|| Box::new(AivCheck { boards, polls: 0 }) as Box<dyn Kernel>)
    }
}

/// The check a synchronize queues: completes once every peer's entry of
/// every op this rank published has been checked against this rank's.
/// Queued behind every kernel of the stream, so each of those ops has its
/// output written when it runs.
#[derive(Debug)]
pub(super) struct AivCheck {
    boards: Arc<AivBoards>,
    polls: u32,
}

impl AivCheck {
    /// The newest op to check, and the first peer that has not issued the
    /// oldest op still unchecked.
    fn missing(&self) -> (u64, Option<u32>) {
        let b = &self.boards;
        let open = b.completed() + 1;
        let peer = b
            .peers
            .iter()
            .find(|p| p.board.read_desc(open).is_none())
            .map(|p| p.rank);
        (open, peer)
    }
}

impl Kernel for AivCheck {
    fn poll(&mut self) -> Poll<Result<()>> {
        let b = &self.boards;
        let (before, upto) = (b.completed(), b.own.last_seq());
        let checked = catch_up(b, upto);
        // a failed op is completed too: peers may wait to reuse its entries
        wake_if_completed(b, before);
        checked?;
        if b.completed() >= upto {
            return Poll::Ready(Ok(()));
        }
        pending_on(&mut self.polls, &b.peers)
    }

    /// A mismatch is not relayed: every rank compares every peer's
    /// descriptor with its own, for every op, and finds it itself.
    fn relays_failure(&self, e: &HcclError) -> bool {
        !crate::link::is_inconsistency(e)
    }

    fn describe(&self) -> String {
        match self.missing() {
            (open, Some(q)) => format!(
                "AIV argument check: waiting for peer rank {q} to issue op {open} on the boards"
            ),
            (open, None) => format!("AIV argument check of op {open} on the boards"),
        }
    }

    fn waiting_link(&self) -> Option<&Arc<dyn Link>> {
        let q = self.missing().1?;
        Some(&self.boards.peer(q).link)
    }
}
