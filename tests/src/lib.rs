//! Shared helpers for hccl-rs integration tests: the reference reduction
//! (from hccl-tools, shared with hccl-test's checker), a way to run one
//! closure per rank on threads with a watchdog, and the worked example
//! executor of `docs/writing-an-executor.md` ([`guide_executor`]), which
//! the multi-process worker registers when asked, and the checks of
//! registered memory and symmetric windows ([`registered`]) and of HCCL's
//! FP8 types ([`fp8`]) and of the repeat path ([`repeat`]) that thread
//! tests and rank processes share.

#![forbid(unsafe_code)]

pub mod alltoallvc;
pub mod capture;
pub mod drill;
pub mod fp8;
pub mod guide_executor;
pub mod in_place;
pub mod registered;
pub mod repeat;
pub mod root_ahead;

pub use hccl_tools::check::{expected_value, input_value, CheckElem as TestElem};
use std::time::Duration;

/// Runs `f(rank)` on one thread per rank; panics (failing the test) if any
/// rank fails or if they have not all finished within `limit`.
pub fn run_ranks<F>(n: u32, limit: Duration, f: F)
where
    F: Fn(u32) + Send + Sync + 'static,
{
    let f = std::sync::Arc::new(f);
    let (tx, rx) = std::sync::mpsc::channel();
    let handles: Vec<_> = (0..n)
        .map(|r| {
            let (f, tx) = (f.clone(), tx.clone());
            std::thread::Builder::new()
                .name(format!("rank{r}"))
                .spawn(move || {
                    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(r)));
                    let _ = tx.send((r, res.is_ok()));
                })
                .expect("spawn rank thread")
        })
        .collect();
    drop(tx);
    let deadline = std::time::Instant::now() + limit;
    for _ in 0..n {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok((r, ok)) => assert!(ok, "rank {r} failed"),
            Err(_) => panic!("ranks did not finish within {limit:?}: hang"),
        }
    }
    for h in handles {
        let _ = h.join();
    }
}

/// `p` communicators of one process (ranks as threads) configured from
/// `env` (key/value pairs as in the environment), with a 20-second
/// `HCCL_EXEC_TIMEOUT` unless `env` sets one, so a hang fails quickly.
pub fn comms_with_env(p: u32, env: &[(&str, &str)]) -> std::sync::Arc<Vec<hccl_adapter::HcclComm>> {
    let mut all = env.to_vec();
    if !env.iter().any(|(k, _)| *k == "HCCL_EXEC_TIMEOUT") {
        all.push(("HCCL_EXEC_TIMEOUT", "20"));
    }
    let config = hccl_adapter::CommConfig::from_source(&all[..]).unwrap();
    std::sync::Arc::new(hccl_adapter::HcclComm::init_all_with(p, config).unwrap())
}

/// Synchronizes `s`, which must fail, and within `limit` (a lost peer is a
/// timeout error, never a hang); returns the error.
pub fn sync_fails_within(s: &hccl_adapter::Stream, limit: Duration) -> hccl_adapter::HcclError {
    let t = std::time::Instant::now();
    let e = s.synchronize().unwrap_err();
    assert!(t.elapsed() < limit, "took {:?}", t.elapsed());
    e
}

/// Rank processes of a multi-process test, killed and reaped when dropped,
/// so a failed or timed-out test leaves no process behind.
pub struct Ranks(pub Vec<std::process::Child>);

impl Drop for Ranks {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The /dev/shm segments that processes `pids` still have (hccl-rs names
/// its segments `hccl-rs-<pid>-...`), for leak checks.
pub fn segments_of(pids: &[u32]) -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| pids.iter().any(|p| n.starts_with(&format!("hccl-rs-{p}-"))))
                .collect()
        })
        .unwrap_or_default()
}

/// Waits up to `limit` for every child process to end, failing the test
/// with `what` if one has not (a hang, or a leaked process), then returns
/// each one's standard output. The children are taken out of `children`
/// (so a kill-on-drop guard holding them has nothing left to kill).
pub fn stdout_of_all(
    children: &mut Vec<std::process::Child>,
    limit: Duration,
    what: &str,
) -> Vec<String> {
    let deadline = std::time::Instant::now() + limit;
    while children
        .iter_mut()
        .any(|c| c.try_wait().ok().flatten().is_none())
    {
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: ranks did not end within {limit:?} (a hang or a leaked process)"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::mem::take(children)
        .into_iter()
        .map(|c| {
            String::from_utf8_lossy(&c.wait_with_output().expect("output").stdout).into_owned()
        })
        .collect()
}

/// (exit code, stdout, stderr) of one rank process.
pub type RankOutcome = (Option<i32>, String, String);

/// Runs `n` rank processes of `worker` (the `hccl-mp-worker` binary) with
/// `scenario`, meeting through root info in a fresh temporary directory,
/// with `env` added; waits up to `limit` for all (a hang fails the test,
/// and the ranks are killed whatever happens) and returns each rank's
/// outcome. The directory is removed afterwards.
pub fn run_worker_ranks(
    worker: &str,
    n: u32,
    scenario: &str,
    env: &[(&str, &str)],
    limit: Duration,
) -> Vec<RankOutcome> {
    let dir = std::env::temp_dir().join(format!("hccl-{scenario}-{n}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.to_string_lossy().into_owned();
    let mut ranks = Ranks(
        (0..n)
            .map(|r| {
                std::process::Command::new(worker)
                    .args(["root_info", &r.to_string(), &n.to_string(), &d, scenario])
                    .env("HCCL_IF_IP", "127.0.0.1")
                    .envs(env.iter().copied())
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .expect("spawn worker")
            })
            .collect(),
    );
    let deadline = std::time::Instant::now() + limit;
    while !ranks
        .0
        .iter_mut()
        .all(|c| c.try_wait().ok().flatten().is_some())
    {
        assert!(
            std::time::Instant::now() < deadline,
            "{scenario} p={n}: the ranks did not end within {limit:?} (hang)"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = std::mem::take(&mut ranks.0)
        .into_iter()
        .map(|c| {
            let o = c.wait_with_output().expect("output");
            (
                o.status.code(),
                String::from_utf8_lossy(&o.stdout).into_owned(),
                String::from_utf8_lossy(&o.stderr).into_owned(),
            )
        })
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    out
}

/// [`run_worker_ranks`] at each rank count of `counts`, failing the test
/// (with every rank's exit code, stdout and stderr) unless every rank
/// exited 0 having printed `OK`.
pub fn assert_worker_ranks_ok(
    worker: &str,
    counts: &[u32],
    scenario: &str,
    env: &[(&str, &str)],
    limit: Duration,
) {
    for &n in counts {
        let results = run_worker_ranks(worker, n, scenario, env, limit);
        assert!(
            results
                .iter()
                .all(|(c, out, _)| *c == Some(0) && out.trim() == "OK"),
            "{scenario} p={n}: (exit code, stdout, stderr) by rank: {results:#?}"
        );
    }
}

/// Whether network namespace hosts can be made here. If not, the calling
/// test fails with the reason, unless `HCCL_RS_SKIP_NETNS=1` (then it is
/// skipped: false).
pub fn netns_or_skip(what: &str) -> bool {
    match hccl_tools::netns::available() {
        Ok(()) => true,
        Err(e) if std::env::var("HCCL_RS_SKIP_NETNS").as_deref() == Ok("1") => {
            eprintln!("{what}: skipped (HCCL_RS_SKIP_NETNS=1): {e}");
            false
        }
        Err(e) => panic!(
            "{what}: cannot make network namespace hosts: {e}. Run the tests as root with \
             iproute2 installed, or set HCCL_RS_SKIP_NETNS=1 to skip the namespace tests"
        ),
    }
}
