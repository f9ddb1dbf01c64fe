//! Loom model of the board protocol (publish / read / complete / reuse,
//! `PROTOCOL.md`): the production functions of `board.rs` over boards of
//! loom atomics, with each entry's payload in a loom `UnsafeCell`, so loom
//! reports any read of a payload that is not ordered after its write
//! (a torn or stale read) and any write that is not ordered after the
//! reads of the op the entry held before (an early reuse).
//!
//! Bounded to stay small: 2 ranks, boards of 2 entries, 3 ops each (the
//! third reuses the first one's entry), as each rank's stream runs its
//! kernels: publishing ahead where the boards allow (without it a rank is
//! never more than one op ahead of its peers and no entry of two is ever
//! contended), the head kernel waiting for `may_reuse`, reading every
//! board in rank order, completing. Each rank checks every payload it
//! reads against the value its publisher wrote for that op.

// Loom's `UnsafeCell` is not `Sync`, and loom's threads need not be
// `Send` (they all run on the test's thread): the cells the model checks
// are shared through `Arc`s all the same.
#![allow(clippy::arc_with_non_send_sync)]

use super::board::{complete, may_reuse, next_seq, publish_entry, read_entry, BoardWords};
use crate::sync::mutation::{self, Mutation};
use crate::sync::{yield_now, Arc, AtomicU64, Ordering};
use loom::cell::UnsafeCell;
use loom::thread;

const RANKS: usize = 2;
/// Entries per board in the model (the real boards have `ENTRIES` = 16).
const ENTRIES: u64 = 2;
/// Ops every rank runs: one more than `ENTRIES`, so an entry is reused.
const OPS: u64 = 3;

/// One rank's board: the protocol words and the entries' payloads.
struct ModelBoard {
    flags: [AtomicU64; ENTRIES as usize],
    published: AtomicU64,
    completed: AtomicU64,
    payload: [UnsafeCell<u64>; ENTRIES as usize],
}

impl ModelBoard {
    fn new() -> Self {
        ModelBoard {
            flags: std::array::from_fn(|_| AtomicU64::new(0)),
            published: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            payload: std::array::from_fn(|_| UnsafeCell::new(0)),
        }
    }

    fn slot(seq: u64) -> usize {
        (seq % ENTRIES) as usize
    }
}

impl BoardWords for ModelBoard {
    type Word = AtomicU64;

    fn flag(&self, seq: u64) -> &AtomicU64 {
        &self.flags[Self::slot(seq)]
    }

    fn published(&self) -> &AtomicU64 {
        &self.published
    }

    fn completed(&self) -> &AtomicU64 {
        &self.completed
    }
}

/// The payload rank `rank` publishes as op `seq`.
fn payload(rank: usize, seq: u64) -> u64 {
    (rank as u64 + 1) * 1000 + seq
}

/// Rank `me`'s kernels, as its stream runs them (`kernel.rs`,
/// `Queue::start_ahead`): the kernels behind the head publish ahead while
/// the boards allow (at most `ENTRIES` published and not completed), the
/// head waits until it may publish, then reads every board in rank order
/// and completes.
fn rank(me: usize, boards: &[ModelBoard; RANKS]) {
    let own = &boards[me];
    // `AivBoards::peers_done`: the rank's cache of its peers' progress
    let peers_done = AtomicU64::new(0);
    let may_publish = |seq| {
        let peers = boards.iter().enumerate().filter(|&(q, _)| q != me);
        may_reuse(seq, ENTRIES, peers.map(|(_, b)| b), &peers_done)
    };
    let publish = |seq| {
        publish_entry(own, seq, || {
            // SAFETY: (the model's cell) the protocol under test orders
            // this write after every read of the entry's previous op;
            // loom checks it.
            own.payload[ModelBoard::slot(seq)].with_mut(|p| unsafe { *p = payload(me, seq) });
        });
    };
    for head in 1..=OPS {
        // publish ahead: the kernels behind the head, in queue order
        loop {
            let next = next_seq(own);
            if next > OPS || next >= head + ENTRIES || !may_publish(next) {
                break;
            }
            publish(next);
        }
        // the head kernel stays pending (publishes nothing) until its
        // entry is free
        while next_seq(own) <= head {
            if may_publish(head) {
                publish(head);
            } else {
                yield_now();
            }
        }
        for (q, board) in boards.iter().enumerate() {
            let got = loop {
                let read = read_entry(board, head, || {
                    // SAFETY: (the model's cell) ordered after the
                    // publisher's write by the flag; loom checks it.
                    board.payload[ModelBoard::slot(head)].with(|p| unsafe { *p })
                });
                match read {
                    Some(v) => break v,
                    None => yield_now(),
                }
            };
            assert_eq!(
                got,
                payload(q, head),
                "rank {me} read a stale or torn payload of rank {q}'s op {head}"
            );
        }
        let before = own.completed.load(Ordering::Relaxed);
        complete(own, head);
        assert!(before < head, "completed only grows");
    }
}

fn model() {
    let mut builder = loom::model::Builder::new();
    // Every interleaving of two ranks of three ops takes minutes; three
    // preemptions (as tokio's CI uses), about 26,000 interleavings, take
    // a second or two and still reach every window the protocol has (a
    // reader between a payload write and its flag, a writer between a
    // peer's read and its completion): the mutation tests below show both
    // are reached.
    builder.preemption_bound = Some(3);
    builder.check(|| {
        let boards = Arc::new([ModelBoard::new(), ModelBoard::new()]);
        let peer = {
            let boards = boards.clone();
            thread::spawn(move || rank(1, &boards))
        };
        rank(0, &boards);
        peer.join().unwrap();
    });
}

/// The protocol as written: no interleaving reads a payload before its
/// publication completes or overwrites an entry a peer still reads.
#[test]
fn board_publish_complete_reuse() {
    model();
}

/// A flag stored without release: a reader that sees it may read the
/// payload before the publisher's write of it.
#[test]
#[should_panic(expected = "Causality violation")]
fn board_catches_relaxed_flag() {
    mutation::with(Mutation::BoardFlagRelaxed, model);
}

/// Reuse one op early: a writer overwrites an entry while a peer may still
/// read the op it held.
#[test]
#[should_panic(expected = "Causality violation")]
fn board_catches_early_reuse() {
    mutation::with(Mutation::BoardReuseEarly, model);
}
