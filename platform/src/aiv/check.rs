//! HCCL's consistency check on the boards: every rank compares every
//! peer's op descriptor with its own, for every op — in the op's fold for
//! the entries it takes data from, later ([`catch_up`]) for the others.

use super::board::{AivBoards, DESC_LEN};
use crate::error::{HcclError, Result};
use crate::link::OpDesc;
use crate::sync::mapped::fence;
use crate::sync::Ordering;

/// Whether two descriptors are equal, as five word compares (an array
/// comparison calls `memcmp`, a measurable share of an 8-byte op).
pub(super) fn same_desc(a: &[u8; DESC_LEN], b: &[u8; DESC_LEN]) -> bool {
    let word = |d: &[u8; DESC_LEN], i: usize| {
        u64::from_ne_bytes(d[8 * i..8 * i + 8].try_into().expect("8 bytes"))
    };
    (0..DESC_LEN / 8).all(|i| word(a, i) == word(b, i))
}

/// Compares a peer's descriptor with this rank's: `Err` (HCCL's
/// inconsistency error, naming the differing field and both values) when
/// they differ.
pub(super) fn check_desc(
    me: u32,
    q: u32,
    mine: &[u8; DESC_LEN],
    theirs: &[u8; DESC_LEN],
) -> Result<()> {
    if same_desc(mine, theirs) {
        return Ok(());
    }
    let widen = |d: &[u8; DESC_LEN]| {
        let mut w = [0u8; OpDesc::WIRE];
        w[..DESC_LEN].copy_from_slice(d);
        OpDesc::from_bytes(&w)
    };
    let e = widen(mine)
        .check(&widen(theirs), q)
        .err()
        .unwrap_or_else(|| HcclError::internal("AIV descriptors differ"));
    Err(e.rank(me))
}

/// Checks every peer's entry of the ops after this rank's `completed` up
/// to `upto` (ops whose output this rank has written) against this rank's
/// own entry, in op order, as far as the peers have published, and moves
/// `completed` up to the newest op fully checked.
///
/// The entries are still there: a peer reuses the entry of op m only
/// once this rank completed m, and this rank reuses its own only once it
/// did too ([`AivBoards::may_publish`]).
pub(super) fn catch_up(b: &AivBoards, upto: u64) -> Result<()> {
    let start = b.completed();
    let mut done = start;
    'ops: while done < upto {
        let m = done + 1;
        let Some(mine) = b.own.read_desc(m) else {
            return Err(HcclError::internal(format!(
                "AIV op {m} on the boards: this rank's own entry is gone"
            )));
        };
        for peer in &b.peers {
            let theirs = match peer.board.read_desc(m) {
                Some(d) => d,
                // Ask the peer to wake this rank when it publishes op m
                // (a publisher otherwise wakes only the ranks that take
                // data from it), then look once more: the store-buffering
                // pattern with the publisher's fence (see `board.rs`).
                None if b.own.check_wait().load(Ordering::Relaxed) != m => {
                    b.own.check_wait().store(m, Ordering::Relaxed);
                    fence(Ordering::SeqCst);
                    match peer.board.read_desc(m) {
                        Some(d) => d,
                        None => break 'ops,
                    }
                }
                None => break 'ops,
            };
            check_desc(b.rank, peer.rank, &mine, &theirs).map_err(|e| {
                // op m failed and is reported now: for the boards it is
                // over (every op before it was checked), so no later check
                // reports it again and the peers may reuse its entries
                b.own.set_done(m);
                if m == upto {
                    e
                } else {
                    e.during(format!(
                        "checking op {m} on the boards (an earlier op, whose output this \
                         rank wrote without needing rank {}'s data)",
                        peer.rank
                    ))
                }
            })?;
        }
        done = m;
    }
    if done != start {
        b.own.set_done(done);
    }
    if done == upto && b.own.check_wait().load(Ordering::Relaxed) != 0 {
        b.own.check_wait().store(0, Ordering::Relaxed);
    }
    Ok(())
}
