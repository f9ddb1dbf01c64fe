//! The MPI comparison benchmark (`tools/bench/mpi_bench.c`, what
//! `compare.sh` and `compare-hosts.sh` time Open MPI with) runs on
//! buffers filled with real data: it checks every page of its buffers
//! resident before timing, and this test shows the check catches buffers
//! left untouched (the zero-page artifact of issue 30) as well as passing
//! filled ones. Needs Open MPI's `mpicc` and `mpirun` (CI installs them
//! for the namespace mpirun tests); without them it fails saying so.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// Runs `cmd`, killing it after `limit`.
fn run_limited(cmd: &mut Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let t = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t.elapsed() > limit {
            let _ = child.kill();
            panic!("{cmd:?} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn build() -> PathBuf {
    let out = std::env::temp_dir().join(format!("mpi_bench-{}", std::process::id()));
    let o = Command::new("mpicc")
        .args(["-O2", "-Wall", "-Werror", "-o"])
        .arg(&out)
        .arg(repo().join("tools/bench/mpi_bench.c"))
        .output()
        .expect("mpicc (Open MPI) must be installed: apt-get install libopenmpi-dev openmpi-bin");
    assert!(
        o.status.success(),
        "mpicc: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

fn bench(exe: &PathBuf, no_fill: bool) -> Output {
    let mut cmd = Command::new("mpirun");
    cmd.args(["--allow-run-as-root", "--oversubscribe", "-np", "2"])
        .arg(exe)
        // 4 MiB: buffers large enough that malloc maps fresh pages
        .args(["broadcast", "4194304", "4194304", "2", "2", "1"]);
    if no_fill {
        cmd.env("MPI_BENCH_NO_FILL", "1");
    }
    run_limited(&mut cmd, Duration::from_secs(60))
}

#[test]
fn the_mpi_benchmark_refuses_untouched_buffers_and_times_filled_ones() {
    let exe = build();
    let filled = bench(&exe, false);
    let (out, err) = (
        String::from_utf8_lossy(&filled.stdout),
        String::from_utf8_lossy(&filled.stderr),
    );
    assert!(filled.status.success(), "{out}\n{err}");
    assert!(err.contains("every page resident"), "{err}");
    assert!(out.contains("4194304 |"), "a row for 4 MiB: {out}");
    let untouched = bench(&exe, true);
    let err = String::from_utf8_lossy(&untouched.stderr);
    assert!(
        !untouched.status.success(),
        "untouched buffers must be refused: {err}"
    );
    assert!(err.contains("not resident"), "{err}");
    let _ = std::fs::remove_file(&exe);
}
