//! Op retry over a flapping link (issue 32, HCCL's `HCCL_OP_RETRY_ENABLE`):
//! rank processes on 2 network namespace hosts loop checked 16 MiB
//! AllReduces (`hccl-mp-worker ... flap`) while the test takes one host's
//! interface down for 300 ms and up again. The link timeout is 100 ms
//! (`HCCL_RS_TCP_LINK_TIMEOUT_MS`), so the flap drops the links between
//! the hosts. With retry on, every op completes with the right sum and
//! the communicator was rebuilt; with retry off, the ops fail with an
//! error naming the dropped link, and nothing hangs.
//!
//! Needs root and iproute2, as the namespace tests (`netns.rs`):
//! without them each test fails saying so, unless `HCCL_RS_SKIP_NETNS=1`.

use hccl_tests::drill::{flap_trial, FlapTrial};
use hccl_tests::{netns_or_skip, segments_of};
use hccl_tools::netns::NetnsHosts;
use std::time::{Duration, Instant};

const WORKER: &str = env!("CARGO_BIN_EXE_hccl-mp-worker");

/// One trial on 2 fresh namespace hosts (see `drill::flap_trial`).
fn trial(what: &str, per_host: u32, env: &[(&str, &str)]) -> FlapTrial {
    let hosts = NetnsHosts::up(&format!("fr{}", std::process::id()), 2, None).unwrap();
    let t = flap_trial(
        WORKER,
        &hosts,
        per_host,
        Duration::from_millis(300),
        env,
        what,
    );
    hosts.down().unwrap();
    t
}

/// Retry on (`L1:1`, no hold): the flap drops the links between the hosts
/// mid-op, every rank takes part in the retry (the ones inside a host too,
/// whose own links never failed), and every op of every rank completes
/// with the right sum.
#[test]
fn with_retry_on_every_op_completes_across_a_300ms_link_flap() {
    let what = "op retry across a link flap";
    if !netns_or_skip(what) {
        return;
    }
    // a flap that caught no data in flight (every rank between ops, on
    // a loaded machine) is ridden out by TCP and retries nothing: such a
    // trial must still be all correct, and up to 3 are run until one
    // retried, so the retry itself is tested
    for attempt in 1..=3 {
        let t = trial(
            what,
            2,
            &[
                ("HCCL_OP_RETRY_ENABLE", "L0:0,L1:1"),
                (
                    "HCCL_OP_RETRY_PARAMS",
                    "MaxCnt:3,HoldTime:0,IntervalTime:100",
                ),
            ],
        );
        for (r, l) in t.lines.iter().enumerate() {
            println!("{what}: trial {attempt}, rank {r}: {l}");
            assert!(
                l.get("code").is_none(),
                "{what}: rank {r} failed: {}",
                l["message"]
            );
            assert!(l["ops"].as_u64().unwrap() >= 2, "{what}: rank {r}: {l}");
        }
        assert!(segments_of(&t.pids).is_empty(), "{what}: segments left");
        let retried: Vec<bool> = t
            .lines
            .iter()
            .map(|l| l["recoveries"].as_u64().unwrap() >= 1)
            .collect();
        // the ranks retry together or not at all
        assert!(
            retried.iter().all(|&r| r == retried[0]),
            "{what}: some ranks retried, others not: {retried:?}"
        );
        if retried[0] {
            return;
        }
    }
    panic!("{what}: no trial's flap dropped the links (3 tried)");
}

/// Retry off: the ranks on the dropped link fail with an error naming
/// it — the end whose data went unacknowledged says it dropped, the other
/// may find it reset by that end — and every rank ends (none waits out
/// the exec timeout).
#[test]
fn with_retry_off_the_error_names_the_dropped_link() {
    let what = "a link flap without op retry";
    if !netns_or_skip(what) {
        return;
    }
    let started = Instant::now();
    let t = trial(what, 1, &[]);
    for (r, l) in t.lines.iter().enumerate() {
        println!("{what}: rank {r}: {l}");
        let msg = l["message"]
            .as_str()
            .unwrap_or_else(|| panic!("{what}: rank {r} did not fail: {l}"));
        assert!(
            msg.contains("the TCP link between rank 0 and rank 1")
                || msg.contains("the TCP link between rank 1 and rank 0"),
            "{what}: rank {r} must name the dropped link: {msg}"
        );
        assert!(
            msg.contains("dropped") || msg.contains("reset"),
            "{what}: rank {r} must say the link dropped or was reset: {msg}"
        );
    }
    // the end (or ends) whose data went unacknowledged say why
    assert!(
        t.lines.iter().any(|l| {
            let m = l["message"].as_str().unwrap_or_default();
            m.contains("dropped") && m.contains("HCCL_RS_TCP_LINK_TIMEOUT_MS")
        }),
        "{what}: no rank said the link timed out"
    );
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{what}: took {:?}",
        started.elapsed()
    );
    assert!(segments_of(&t.pids).is_empty(), "{what}: segments left");
}
