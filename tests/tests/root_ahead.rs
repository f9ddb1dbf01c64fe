//! Issue 30: a root 300 rooted ops ahead of sleeping peers, with ranks as
//! processes (shared memory, the AIV boards in each rank's segment), p =
//! 2, 5 and 9 (more ranks than cores), every result exact
//! (`hccl_tests::root_ahead`); the thread version at p = 2..9 is in
//! `aiv_ops.rs`. Every rank runs under a deadline and is killed when the
//! test ends.

use std::time::Duration;

const WORKER: &str = env!("CARGO_BIN_EXE_hccl-mp-worker");

/// Rank processes meet through root info on this host, 30-second op and
/// connect timeouts.
const ENV: [(&str, &str); 2] = [("HCCL_EXEC_TIMEOUT", "30"), ("HCCL_CONNECT_TIMEOUT", "30")];

#[test]
fn processes_p2_p5_p9() {
    let limit = Duration::from_secs(120);
    hccl_tests::assert_worker_ranks_ok(WORKER, &[2, 5, 9], "root_ahead", &ENV, limit);
}

/// The repeat path across processes (`hccl_tests::repeat`): every
/// collective repeated on the same buffers with new data, rooted ops'
/// senders 300 repeats ahead of sleeping receivers, interleaved ops;
/// p = 2, 5, 9.
#[test]
fn repeat_through_processes_p2_p5_p9() {
    let limit = Duration::from_secs(150);
    hccl_tests::assert_worker_ranks_ok(WORKER, &[2, 5, 9], "repeat", &ENV, limit);
}
