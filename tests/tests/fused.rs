//! The fused compute/communication ops with ranks as processes: results
//! checked on every path at p = 2, 3, 4; a rank killed mid-pipeline is
//! named by the survivors within about a second, with no hang and no
//! shared-memory segment left. Every child runs under a watchdog and is
//! killed when the test ends.

use hccl_tests::{segments_of, Ranks};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const WORKER: &str = env!("CARGO_BIN_EXE_hccl-mp-worker");

fn tempdir(tag: &str) -> String {
    let d = std::env::temp_dir().join(format!("hccl-fused-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d.to_string_lossy().into_owned()
}

fn spawn(n: u32, scenario: &str, dir: &str) -> Ranks {
    Ranks(
        (0..n)
            .map(|r| {
                Command::new(WORKER)
                    .args(["root_info", &r.to_string(), &n.to_string(), dir, scenario])
                    .env("HCCL_EXEC_TIMEOUT", "20")
                    .env("HCCL_CONNECT_TIMEOUT", "20")
                    .env("HCCL_IF_IP", "127.0.0.1")
                    .env_remove("HCCL_RS_FUSED_PATH")
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("spawn worker")
            })
            .collect(),
    )
}

/// Waits for every rank up to `limit` (a hang fails the test, killing
/// the ranks); returns (exit code, stdout, stderr) per rank.
fn wait(mut ranks: Ranks, limit: Duration) -> Vec<(Option<i32>, String, String)> {
    let deadline = Instant::now() + limit;
    while !ranks
        .0
        .iter_mut()
        .all(|c| c.try_wait().ok().flatten().is_some())
    {
        assert!(
            Instant::now() < deadline,
            "ranks did not finish within {limit:?} (hang)"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::mem::take(&mut ranks.0)
        .into_iter()
        .map(|c| {
            let o = c.wait_with_output().unwrap();
            (
                o.status.code(),
                String::from_utf8_lossy(&o.stdout).into_owned(),
                String::from_utf8_lossy(&o.stderr).into_owned(),
            )
        })
        .collect()
}

#[test]
fn every_fused_op_and_path_across_2_3_4_processes() {
    for n in [2, 3, 4] {
        let dir = tempdir(&format!("check{n}"));
        let results = wait(spawn(n, "fused_check", &dir), Duration::from_secs(60));
        let all_ok = results
            .iter()
            .all(|(code, out, _)| *code == Some(0) && out.trim() == "OK");
        assert!(
            all_ok,
            "p={n}: (exit code, stdout, stderr) by rank: {results:#?}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn a_rank_killed_mid_pipeline_is_named_by_the_survivors() {
    let dir = tempdir("kill");
    let mut ranks = spawn(3, "fused_kill", &dir);
    let pids: Vec<u32> = ranks.0.iter().map(Child::id).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !(0..3).all(|r| std::path::Path::new(&format!("{dir}/ready.{r}")).exists()) {
        assert!(Instant::now() < deadline, "the ranks never got going");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(100));
    ranks.0[1].kill().unwrap();
    let killed = Instant::now();
    let results = wait(ranks, Duration::from_secs(30));
    let took = killed.elapsed();
    println!("the survivors failed {took:?} after the kill");
    for r in [0usize, 2] {
        let (code, out, err) = &results[r];
        assert_eq!(*code, Some(2), "rank {r} must fail: {out} {err}");
        assert!(
            out.starts_with("ERROR ") && out.contains("rank 1"),
            "rank {r}'s error must name the lost rank 1: {out}"
        );
    }
    assert!(
        took < Duration::from_secs(5),
        "the survivors took {took:?} to give up"
    );
    assert!(
        segments_of(&pids).is_empty(),
        "segments left after a killed rank: {:?}",
        segments_of(&pids)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
