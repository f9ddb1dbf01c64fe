//! Issue 30: a root 300 rooted ops ahead of sleeping peers, with ranks as
//! processes (shared memory, the AIV boards in each rank's segment), p =
//! 2, 5 and 9 (more ranks than cores), every result exact
//! (`hccl_tests::root_ahead`); the thread version at p = 2..9 is in
//! `aiv_ops.rs`. Every rank runs under a deadline and is killed when the
//! test ends.

use std::time::Duration;

const WORKER: &str = env!("CARGO_BIN_EXE_hccl-mp-worker");

#[test]
fn processes_p2_p5_p9() {
    for n in [2u32, 5, 9] {
        let env = [("HCCL_EXEC_TIMEOUT", "30"), ("HCCL_CONNECT_TIMEOUT", "30")];
        let results =
            hccl_tests::run_worker_ranks(WORKER, n, "root_ahead", &env, Duration::from_secs(120));
        assert!(
            results
                .iter()
                .all(|(c, out, _)| *c == Some(0) && out.trim() == "OK"),
            "p={n}: (exit code, stdout, stderr) by rank: {results:#?}"
        );
    }
}

/// The repeat path across processes (`hccl_tests::repeat`): every
/// collective repeated on the same buffers with new data, rooted ops'
/// senders 300 repeats ahead of sleeping receivers, interleaved ops;
/// p = 2, 5, 9.
#[test]
fn repeat_through_processes_p2_p5_p9() {
    for n in [2u32, 5, 9] {
        let env = [("HCCL_EXEC_TIMEOUT", "30"), ("HCCL_CONNECT_TIMEOUT", "30")];
        let results =
            hccl_tests::run_worker_ranks(WORKER, n, "repeat", &env, Duration::from_secs(150));
        assert!(
            results
                .iter()
                .all(|(c, out, _)| *c == Some(0) && out.trim() == "OK"),
            "p={n}: (exit code, stdout, stderr) by rank: {results:#?}"
        );
    }
}
