//! Issue 30: a root 300 rooted ops ahead of sleeping peers, with ranks as
//! processes (shared memory, the AIV boards in each rank's segment), p =
//! 2, 5 and 9 (more ranks than cores), every result exact
//! (`hccl_tests::root_ahead`); the thread version at p = 2..9 is in
//! `aiv_ops.rs`. Every rank runs under a deadline and is killed when the
//! test ends.

use hccl_tests::Ranks;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const WORKER: &str = env!("CARGO_BIN_EXE_hccl-mp-worker");

#[test]
fn processes_p2_p5_p9() {
    for n in [2u32, 5, 9] {
        let dir = std::env::temp_dir().join(format!("hccl-root-ahead-{n}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let d = dir.to_string_lossy().into_owned();
        let mut ranks = Ranks(
            (0..n)
                .map(|r| {
                    Command::new(WORKER)
                        .args([
                            "root_info",
                            &r.to_string(),
                            &n.to_string(),
                            &d,
                            "root_ahead",
                        ])
                        .env("HCCL_EXEC_TIMEOUT", "30")
                        .env("HCCL_CONNECT_TIMEOUT", "30")
                        .env("HCCL_IF_IP", "127.0.0.1")
                        .stdout(Stdio::piped())
                        .stderr(Stdio::piped())
                        .spawn()
                        .expect("spawn worker")
                })
                .collect(),
        );
        let deadline = Instant::now() + Duration::from_secs(120);
        while !ranks
            .0
            .iter_mut()
            .all(|c| c.try_wait().ok().flatten().is_some())
        {
            assert!(Instant::now() < deadline, "p={n}: the ranks hang");
            std::thread::sleep(Duration::from_millis(20));
        }
        let results: Vec<_> = std::mem::take(&mut ranks.0)
            .into_iter()
            .map(|c| {
                let o = c.wait_with_output().unwrap();
                (
                    o.status.code(),
                    String::from_utf8_lossy(&o.stdout).into_owned(),
                    String::from_utf8_lossy(&o.stderr).into_owned(),
                )
            })
            .collect();
        assert!(
            results
                .iter()
                .all(|(c, out, _)| *c == Some(0) && out.trim() == "OK"),
            "p={n}: (exit code, stdout, stderr) by rank: {results:#?}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
