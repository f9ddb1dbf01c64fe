//! Fuzz target of what the TCP link reads off the wire through a
//! standalone function: the op descriptor a `Desc` frame carries
//! ([`OpDesc::from_bytes`]), then checked against the local one.
//!
//! The frame header itself (magic, type, memory kind, offset, length) is
//! parsed inline in the TCP link's progress loop, on its connection state,
//! and has no standalone parser to call from here; its length fields are
//! bounded there (an abort reason reads at most 4096 bytes, a data frame
//! only into a registered range that `range(off, len)` has checked).
//!
//! Cases: `PROPTEST_CASES` (default 3000); `tools/fuzz.sh` runs a million.

use hccl_platform::OpDesc;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::time::{Duration, Instant};

#[test]
fn fuzz_tcp_desc_frame() {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(3000);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let wire = proptest::collection::vec(any::<u8>(), OpDesc::WIRE);
    // a peer's descriptor: random, or the local one with a byte changed
    let strategy = (
        wire.clone(),
        wire,
        any::<bool>(),
        any::<(usize, u8)>(),
        any::<u32>(),
    );
    runner
        .run(&strategy, |(local, remote, same, (at, byte), peer)| {
            let start = Instant::now();
            let local: [u8; OpDesc::WIRE] = local.try_into().expect("WIRE bytes");
            let mut remote: [u8; OpDesc::WIRE] = remote.try_into().expect("WIRE bytes");
            if same {
                remote = local;
                remote[at % OpDesc::WIRE] ^= byte;
            }
            let (l, r) = (OpDesc::from_bytes(&local), OpDesc::from_bytes(&remote));
            // lossless: every bit pattern is a descriptor, and back
            prop_assert_eq!(l.to_bytes(), local);
            prop_assert_eq!(r.to_bytes(), remote);
            // the check accepts exactly the descriptors whose compared
            // part (the first 40 bytes; the buffer addresses after it
            // differ between ranks by nature) is equal
            let compared = |b: &[u8; OpDesc::WIRE]| b[..40].to_vec();
            match l.check(&r, peer) {
                Ok(()) => prop_assert_eq!(compared(&local), compared(&remote)),
                Err(e) => {
                    prop_assert!(compared(&local) != compared(&remote));
                    prop_assert!(e.to_string().contains("inconsistent"), "{}", e);
                }
            }
            prop_assert!(start.elapsed() < Duration::from_secs(2));
            Ok(())
        })
        .unwrap();
}
