//! Loom model of the write-based link's counters (ack / data / wait-done,
//! `write_based.rs`): two ends, each a [`WriteBased`] over the in-process
//! link's [`Counters`] (loom atomics under loom), driven by the production
//! [`poll`] with its [`Taken`] tickets, verb by verb as a stream's driver
//! polls them.
//!
//! The sender runs `RxAck, TxAsync, TxWaitDone` per round, the receiver
//! `TxAck, RxWaitDone` and then reads its buffer, as an executor's step
//! does. The transfer's bytes really move (a copy into the receiver's
//! buffer); the model's transport also marks the receiver's buffer as
//! written in a loom `UnsafeCell` when `TxAsync` asks for it
//! ([`WriteBased::remote`]), and the receiver marks it read, so loom
//! reports a sender that writes before the receiver's ack is ordered
//! after its last read, and a receiver that reads before the data count
//! is ordered after the write. Both ends check that every counter only
//! grows.

// Loom's `UnsafeCell` is not `Sync`, and loom's threads need not be
// `Send` (they all run on the test's thread): the cells the model checks
// are shared through `Arc`s all the same.
#![allow(clippy::arc_with_non_send_sync)]

use super::write_based::{poll, Counter, Counters, Taken, WriteBased};
use super::{LinkOp, LinkOpState, OpDesc};
use crate::error::Result;
use crate::mem::{DeviceMem, MemKind};
use crate::sync::mutation::{self, Mutation};
use crate::sync::{yield_now, Arc};
use loom::cell::UnsafeCell;
use loom::thread;
use std::cell::Cell;
use std::task::Poll;

/// Transfers in the model: the second one must wait for the receiver's
/// second ack, i.e. for its read of the first.
const ROUNDS: u64 = 2;

/// One end of a model link.
struct End {
    /// Counters the peer raises at this end.
    mine: Arc<Counters>,
    /// Counters this end raises at the peer.
    theirs: Arc<Counters>,
    /// The peer's buffer (real memory the transfer copies into) ...
    peer_buf: DeviceMem,
    /// ... and the loom cell that stands for it: how many transfers were
    /// written into it.
    peer_cell: Arc<UnsafeCell<u64>>,
    taken: Taken,
    /// The highest count seen of each counter (they only grow).
    seen: Cell<[u64; 4]>,
}

impl End {
    /// Polls `op` until it completes, as a driver does (a pending verb
    /// stays at its stream's head).
    fn run(&self, op: LinkOp) {
        let mut state = LinkOpState::default();
        loop {
            match poll(self, &self.taken, &op, &mut state) {
                Poll::Ready(r) => return r.expect("the model's verbs do not fail"),
                Poll::Pending => yield_now(),
            }
        }
    }
}

impl WriteBased for End {
    fn raise(&self, c: Counter) {
        self.theirs.raise(c);
    }

    fn raised(&self, c: Counter) -> u64 {
        let n = self.mine.raised(c);
        let mut seen = self.seen.get();
        assert!(n >= seen[c as usize], "counter {c:?} went down");
        seen[c as usize] = n;
        self.seen.set(seen);
        n
    }

    fn remote(&self, kind: MemKind, offset: usize, len: usize) -> Result<DeviceMem> {
        assert_eq!(kind, MemKind::CclInput);
        // SAFETY: (the model's cell) the ack protocol under test orders
        // this write after the receiver's read of the previous transfer;
        // loom checks it.
        self.peer_cell.with_mut(|n| unsafe { *n += 1 });
        self.peer_buf.range(offset, len)
    }

    fn put_desc(&self, _n: u64, _d: &OpDesc) {
        unreachable!("the model sends no descriptors")
    }

    fn get_desc(&self, _n: u64) -> Option<OpDesc> {
        unreachable!("the model sends no descriptors")
    }

    fn check(&self) -> Result<()> {
        Ok(())
    }

    fn local(&self) -> u32 {
        0
    }

    fn peer(&self) -> u32 {
        1
    }

    fn peer_pid(&self) -> u32 {
        crate::mem::cma::own_pid()
    }
}

fn model() {
    // two rounds, every interleaving (no preemption bound): a fraction of
    // a second
    loom::model(|| {
        let (to_sender, to_receiver) =
            (Arc::new(Counters::default()), Arc::new(Counters::default()));
        let buf = DeviceMem::alloc(8).unwrap();
        let cell = Arc::new(UnsafeCell::new(0u64));
        let sender = End {
            mine: to_sender.clone(),
            theirs: to_receiver.clone(),
            peer_buf: buf.clone(),
            peer_cell: cell.clone(),
            taken: Taken::default(),
            seen: Cell::new([0; 4]),
        };
        let receiver = End {
            mine: to_receiver,
            theirs: to_sender,
            // the receiver never transfers
            peer_buf: DeviceMem::alloc(8).unwrap(),
            peer_cell: Arc::new(UnsafeCell::new(0)),
            taken: Taken::default(),
            seen: Cell::new([0; 4]),
        };
        let tx = thread::spawn(move || {
            let src = DeviceMem::alloc(8).unwrap();
            for round in 1..=ROUNDS {
                sender.run(LinkOp::RxAck);
                src.copy_from_host_bytes(&round.to_ne_bytes()).unwrap();
                sender.run(LinkOp::TxAsync {
                    dst_kind: MemKind::CclInput,
                    dst_offset: 0,
                    src: src.pin(),
                });
                sender.run(LinkOp::TxWaitDone);
            }
        });
        for round in 1..=ROUNDS {
            receiver.run(LinkOp::TxAck);
            receiver.run(LinkOp::RxWaitDone);
            // SAFETY: (the model's cell) the data count orders this read
            // after the sender's write; loom checks it.
            let writes = cell.with(|n| unsafe { *n });
            let mut bytes = [0u8; 8];
            buf.copy_to_host_bytes(&mut bytes).unwrap();
            assert_eq!(
                (writes, u64::from_ne_bytes(bytes)),
                (round, round),
                "the receiver read its buffer before transfer {round} or after the next"
            );
        }
        tx.join().unwrap();
    });
}

/// The counters as written: no interleaving lets the sender write before
/// the receiver's ack or the receiver read before the data count.
#[test]
fn link_ack_data_wait_done() {
    model();
}

/// A raise without release: the receiver may see the data count before
/// the bytes it announces.
#[test]
#[should_panic(expected = "Causality violation")]
fn link_catches_relaxed_raise() {
    mutation::with(Mutation::LinkRaiseRelaxed, model);
}

/// Waits numbered from 0: the first `RxAck` / `RxWaitDone` pass with no
/// raise at all, so the sender overwrites what the receiver still reads.
#[test]
#[should_panic(expected = "the receiver read its buffer")]
fn link_catches_early_ticket() {
    mutation::with(Mutation::LinkTicketEarly, model);
}
