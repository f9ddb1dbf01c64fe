//! Soak (issue 15), the CI-sized version: 4 rank processes run the same
//! seeded pseudo-random sequence of 10^4 ops over every primitive
//! (`hccl-mp-worker ... soak`, sizes up to 4 MiB skewed small, random roots
//! and reduce operators), every result checked against a host reference.
//! Each rank samples its footprint after a 100-op warm-up and at the end:
//! open fds, its /dev/shm segments and the segments it has mapped must be
//! exactly flat, the resident set may grow by less than [`RSS_BOUND_KIB`]
//! (the allocator's slack, not a leak); every rank exits 0 and leaves
//! nothing in /dev/shm. `tools/soak.sh` runs the 10^5-op version.

use hccl_tests::{segments_of, Ranks};
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const WORKER: &str = env!("CARGO_BIN_EXE_hccl-mp-worker");
const RANKS: u32 = 4;
/// Ops per rank: about 12 s in a debug build alone on 2 cores.
const OPS: u64 = 10_000;
/// The resident set may grow this much between the samples (KiB).
const RSS_BOUND_KIB: i64 = 16 << 10;
/// The whole run must end within this (nextest kills at 180 s).
const LIMIT: Duration = Duration::from_secs(150);

fn field(v: &serde_json::Value, sample: &str, name: &str) -> i64 {
    v[sample][name]
        .as_i64()
        .unwrap_or_else(|| panic!("no {sample}.{name} in {v}"))
}

#[test]
fn soak_mixed_ops_stay_flat() {
    let dir = std::env::temp_dir().join(format!("hccl-soak-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.to_string_lossy().into_owned();
    let mut ranks = Ranks(
        (0..RANKS)
            .map(|r| {
                let mut cmd = Command::new(WORKER);
                cmd.args(["root_info", &r.to_string(), &RANKS.to_string(), &d, "soak"]);
                hccl_tests::drill::clear_worker_env(&mut cmd);
                let err = std::fs::File::create(dir.join(format!("stderr.{r}"))).unwrap();
                cmd.env("HCCL_BUFFSIZE", "1")
                    .env("HCCL_EXEC_TIMEOUT", "60")
                    .env("HCCL_CONNECT_TIMEOUT", "30")
                    .env("HCCL_IF_IP", "127.0.0.1")
                    .env("SOAK_OPS", OPS.to_string())
                    .env("SOAK_SEED", "15")
                    .env("SOAK_CHECK_EVERY", "1")
                    .stdout(Stdio::piped())
                    .stderr(err)
                    .spawn()
                    .expect("spawn worker")
            })
            .collect(),
    );
    let pids: Vec<u32> = ranks.0.iter().map(Child::id).collect();
    let t0 = Instant::now();
    while !ranks
        .0
        .iter_mut()
        .all(|c| c.try_wait().ok().flatten().is_some())
    {
        assert!(
            t0.elapsed() < LIMIT,
            "the soak did not finish within {LIMIT:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut lines = Vec::new();
    for (r, c) in ranks.0.iter_mut().enumerate() {
        let status = c.wait().unwrap();
        let mut out = String::new();
        c.stdout.take().unwrap().read_to_string(&mut out).unwrap();
        let err = std::fs::read_to_string(dir.join(format!("stderr.{r}"))).unwrap_or_default();
        assert!(
            status.success() && out.lines().any(|l| l == "OK"),
            "rank {r} failed ({status}): {out}\n{err}"
        );
        let line = out
            .lines()
            .find_map(|l| l.strip_prefix("SOAK "))
            .unwrap_or_else(|| panic!("rank {r} printed no SOAK line: {out}"));
        println!("rank {r}: {line}");
        lines.push(serde_json::from_str::<serde_json::Value>(line).unwrap());
    }
    println!("{RANKS} ranks x {OPS} ops in {:?}", t0.elapsed());
    for (r, v) in lines.iter().enumerate() {
        // every rank drew the same sequence, and it covered every primitive
        assert_eq!(v["per_op"], lines[0]["per_op"], "rank {r}");
        assert!(
            v["per_op"]
                .as_array()
                .is_some_and(|a| a.len() == 13 && a.iter().all(|n| n.as_u64() > Some(0))),
            "rank {r}: {v}"
        );
        assert_eq!(v["ops"].as_u64(), Some(OPS), "rank {r}: {v}");
        assert_eq!(v["checked"].as_u64(), Some(OPS), "rank {r}: {v}");
        assert_eq!(v["bad"].as_u64(), Some(0), "rank {r}: {}", v["first_bad"]);
        for name in ["fds", "shm_own", "shm_mapped"] {
            assert_eq!(
                field(v, "end", name),
                field(v, "start", name),
                "rank {r}: {name} not flat: {v}"
            );
        }
        let grew = field(v, "end", "rss_kib") - field(v, "start", "rss_kib");
        println!(
            "rank {r}: rss {} -> {} -> {} KiB (growth {grew} KiB), fds {} -> {}, shm mapped {} -> {}",
            field(v, "start", "rss_kib"),
            field(v, "mid", "rss_kib"),
            field(v, "end", "rss_kib"),
            field(v, "start", "fds"),
            field(v, "end", "fds"),
            field(v, "start", "shm_mapped"),
            field(v, "end", "shm_mapped"),
        );
        assert!(
            grew < RSS_BOUND_KIB,
            "rank {r}: RSS grew {grew} KiB (bound {RSS_BOUND_KIB} KiB): {v}"
        );
    }
    let left = segments_of(&pids);
    assert!(left.is_empty(), "segments left in /dev/shm: {left:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
