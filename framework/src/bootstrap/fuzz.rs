//! What the framework's fuzz targets share: the proptest configuration
//! (case count from `PROPTEST_CASES`), the per-case time bound, and
//! generators of the values the wire formats carry.
//!
//! The targets live beside the parsers they feed (`mod fuzz` in
//! `root_info.rs`, `rank_table.rs`, `algo_env.rs`, `tuning.rs`), so they
//! reach private functions without widening any API. Every target's name
//! starts with `fuzz_`: `tools/fuzz.sh` runs them all with a million cases
//! each.

use super::RankInfo;
use proptest::prelude::*;
use proptest::test_runner::Config;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

/// Cases per target in an ordinary test run: a few thousand keeps the
/// whole fuzz set to seconds; `PROPTEST_CASES` overrides it.
pub(crate) const DEFAULT_CASES: u32 = 3000;

/// The longest one case may take: parsers answer in microseconds, so a
/// case that runs this long is a hang (or a loop sized by its input).
pub(crate) const CASE_LIMIT: Duration = Duration::from_secs(2);

/// The proptest configuration of every target: `PROPTEST_CASES` cases
/// (default [`DEFAULT_CASES`]), no regression files written into the
/// source tree (a failure prints its minimal input instead).
pub(crate) fn config() -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(DEFAULT_CASES);
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

/// Runs one case and fails it if it took longer than [`CASE_LIMIT`].
pub(crate) fn bounded<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let out = f();
    let took = start.elapsed();
    assert!(
        took < CASE_LIMIT,
        "{what}: one case took {took:?} (limit {CASE_LIMIT:?})"
    );
    out
}

/// Any IP address.
pub(crate) fn ip() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<u32>().prop_map(|v| IpAddr::V4(Ipv4Addr::from(v))),
        any::<u128>().prop_map(|v| IpAddr::V6(Ipv6Addr::from(v))),
    ]
}

/// Any socket address (no IPv6 scope: the formats carry none).
pub(crate) fn socket_addr() -> impl Strategy<Value = SocketAddr> {
    (ip(), any::<u16>()).prop_map(|(ip, port)| SocketAddr::new(ip, port))
}

/// Mostly small numbers (the values that make valid tables), sometimes
/// anything, including the extremes a length or index field can hold.
pub(crate) fn small_or_any_u32(small: u32) -> impl Strategy<Value = u32> {
    prop_oneof![
        6 => 0..small,
        2 => any::<u32>(),
        1 => Just(u32::MAX),
        1 => Just(u32::MAX / 2 + 1),
    ]
}

/// Text: short printable strings, arbitrary Unicode, or long runs.
pub(crate) fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z0-9_./:-]{0,24}",
        3 => any::<String>(),
        1 => (0usize..5000).prop_map(|n| "x".repeat(n)),
    ]
}

/// A rank's self-description with fields from the generators above.
pub(crate) fn rank_info(max_rank: u32) -> impl Strategy<Value = RankInfo> {
    (
        small_or_any_u32(max_rank),
        text(),
        socket_addr(),
        any::<u64>(),
        proptest::collection::vec(any::<u8>(), 0..64),
    )
        .prop_map(
            |(rank, host_id, link_addr, buffer_size, transports)| RankInfo {
                rank,
                host_id,
                link_addr,
                buffer_size,
                transports,
            },
        )
}
