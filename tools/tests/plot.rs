//! `hccl-test --plot` and `hccl-plot` end to end: the SVG they write holds
//! the op, the axes and the measured and predicted lines; bad paths and
//! bad input fail with a message and a non-zero exit.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The palette colours (tools/src/plot.rs `PALETTE`): 0 is the measured
/// line, 1 and 2 the model's lines of `hccl-test --plot`.
const MEASURED: &str = "#1F77B4";
const MODEL: [&str; 2] = ["#D62728", "#2CA02C"];

/// `bin args`, killed and failed after `limit` (a hang must not stall CI).
fn run(bin: &str, args: &[&str], limit: Duration) -> Output {
    let mut child = Command::new(bin)
        .args(args)
        .env("HCCL_EXEC_TIMEOUT", "60")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{bin} {args:?} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("output")
}

fn hccl_test(args: &[&str]) -> Output {
    run(
        env!("CARGO_BIN_EXE_hccl-test"),
        args,
        Duration::from_secs(150),
    )
}

fn hccl_plot(args: &[&str]) -> Output {
    run(
        env!("CARGO_BIN_EXE_hccl-plot"),
        args,
        Duration::from_secs(30),
    )
}

/// A fresh directory for one test, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("hccl-plot-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }

    fn path(&self, file: &str) -> String {
        self.0.join(file).display().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Each `<polyline>` of `svg` as (stroke colour, number of points).
fn polylines(svg: &str) -> Vec<(String, usize)> {
    svg.split("<polyline")
        .skip(1)
        .map(|el| {
            let el = &el[..el.find("/>").unwrap_or(el.len())];
            let attr = |name: &str| {
                let at = el.find(&format!("{name}=\"")).map(|i| i + name.len() + 2);
                at.map(|i| el[i..].split('"').next().unwrap_or_default().to_owned())
                    .unwrap_or_default()
            };
            (attr("stroke"), attr("points").split_whitespace().count())
        })
        .collect()
}

fn assert_ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: exit {:?}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A short sweep with `--plot`: the SVG has the title, the axis labels and
/// the legend, both measured lines (bus bandwidth and average time) with a
/// point per size, and a model prediction for every size in each panel.
fn plot_of_a_sweep(transport: &str) {
    let dir = Scratch::new(&format!("sweep-{transport}"));
    let svg_path = dir.path("sweep.svg");
    let out = hccl_test(&[
        "all_reduce",
        "-p",
        "4",
        "-b",
        "8",
        "-e",
        "64K",
        "-f",
        "2",
        "-n",
        "3",
        "-w",
        "1",
        "--transport",
        transport,
        "--format",
        "json",
        "--plot",
        &svg_path,
    ]);
    assert_ok(&out, transport);
    let sizes = String::from_utf8_lossy(&out.stdout).lines().count();
    assert_eq!(sizes, 14, "8 B to 64 KiB: 14 rows");
    let svg = std::fs::read_to_string(&svg_path).expect("the SVG was written");
    assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(100)]);
    assert!(svg.trim_end().ends_with("</svg>"));
    for text in [
        "all_reduce, p=4, fp32, transport ",
        transport,
        "message size (bytes, log2)",
        "bus bandwidth (GB/s)",
        "time per op (µs, log)",
        "measured: bus bandwidth / average",
        "p50 of n single ops",
        "p99 of n single ops",
        "model: ",
        "executors that ran: ",
    ] {
        assert!(svg.contains(text), "{transport}: no '{text}' in the SVG");
    }
    let lines = polylines(&svg);
    let measured = lines
        .iter()
        .filter(|(c, n)| c == MEASURED && *n == sizes)
        .count();
    assert_eq!(measured, 2, "{transport}: measured lines {lines:?}");
    // every all_reduce size has a prediction (the executor's, or the best
    // plan's where it has no formula), in both panels; each model colour
    // also has a two-point legend sample
    let model: Vec<_> = lines
        .iter()
        .filter(|(c, _)| MODEL.contains(&c.as_str()))
        .collect();
    let colours = MODEL
        .iter()
        .filter(|m| model.iter().any(|(c, _)| c == *m))
        .count();
    assert!(colours >= 1, "{transport}: no model line in {lines:?}");
    // a line of one point is drawn as its marker only
    let drawn: usize = model.iter().map(|(_, n)| n).sum::<usize>() - 2 * colours;
    assert!(
        drawn > sizes && drawn <= 2 * sizes,
        "{transport}: model lines {model:?}"
    );
}

#[test]
fn hccl_test_plot_inproc_has_measured_and_model_lines() {
    plot_of_a_sweep("inproc");
}

#[test]
fn hccl_test_plot_process_has_measured_and_model_lines() {
    plot_of_a_sweep("process");
}

/// An op without a cost formula says so in the legend instead of
/// drawing a prediction.
#[test]
fn hccl_test_plot_of_an_op_without_formula_says_so() {
    let dir = Scratch::new("sendrecv");
    let svg_path = dir.path("sr.svg");
    let out = hccl_test(&[
        "send_recv",
        "-p",
        "2",
        "-b",
        "8",
        "-e",
        "1K",
        "-n",
        "2",
        "-w",
        "1",
        "--plot",
        &svg_path,
    ]);
    assert_ok(&out, "send_recv");
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    assert!(svg.contains("send_recv, p=2"));
    assert!(svg.contains("no model prediction: send_recv has no cost formula"));
    assert!(!polylines(&svg)
        .iter()
        .any(|(c, _)| MODEL.contains(&c.as_str())));
}

const ROW: &str = r#"{"op":"all_reduce","ranks":2,"bytes":BYTES,"count":2,"dtype":"fp32","time_us":TIME,"algbw_gbps":0.1,"busbw_gbps":BW,"check":"success","algorithm":"ALGO","p50_us":5.0,"p99_us":7.0,"max_us":7.0}"#;

fn rows(algo: &str, scale: f64) -> String {
    [(8u64, 5.0f64), (1024, 9.0), (65536, 80.0)]
        .iter()
        .map(|&(b, t)| {
            let t = t * scale;
            ROW.replace("BYTES", &b.to_string())
                .replace("TIME", &t.to_string())
                .replace("BW", &(b as f64 / t / 1e3).to_string())
                .replace("ALGO", algo)
                + "\n"
        })
        .collect()
}

/// Two runs on one chart: each file's label (its stem, or `--label`)
/// is in the legend, each run a line in both panels.
#[test]
fn hccl_plot_draws_one_line_per_file_with_its_label() {
    let dir = Scratch::new("two");
    let (a, b) = (dir.path("ring-run.json"), dir.path("mesh.json"));
    std::fs::write(&a, rows("AllReduceRingExecutor", 1.0)).unwrap();
    std::fs::write(&b, rows("AllReduceMeshExecutor", 0.5)).unwrap();
    let svg_path = dir.path("cmp.svg");
    let out = hccl_plot(&["-o", &svg_path, &a, &b]);
    assert_ok(&out, "hccl-plot");
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    assert!(svg.starts_with("<svg"));
    for text in [
        "ring-run",
        "mesh",
        "all_reduce, p=2, fp32",
        "message size (bytes, log2)",
        "bus bandwidth (GB/s)",
        "AllReduceRing",
    ] {
        assert!(svg.contains(text), "no '{text}' in the SVG");
    }
    // two runs × two panels, three points each
    let full = polylines(&svg).iter().filter(|(_, n)| *n == 3).count();
    assert_eq!(full, 4);
    let out = hccl_plot(&[
        "-o", &svg_path, "--label", "hccl-rs", "--title", "T1", &a, &b,
    ]);
    assert_ok(&out, "hccl-plot --label");
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    assert!(svg.contains("hccl-rs") && svg.contains("mesh") && svg.contains("T1"));
    assert!(!svg.contains("ring-run"));
}

fn assert_fails(out: &Output, what: &str, message: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{what} succeeded");
    assert!(
        stderr.contains(message),
        "{what}: stderr lacks '{message}':\n{stderr}"
    );
}

/// An unwritable plot path, and empty, garbled or wrong-shaped input,
/// fail with a message naming the problem and a non-zero exit; hccl-test
/// fails before it measures.
#[test]
fn bad_plot_paths_and_inputs_fail_with_a_message() {
    let dir = Scratch::new("bad");
    let nowhere = dir.path("no/such/dir/x.svg");
    for transport in ["inproc", "process"] {
        let out = hccl_test(&[
            "all_reduce",
            "-p",
            "2",
            "-b",
            "8",
            "-e",
            "8",
            "--transport",
            transport,
            "--plot",
            &nowhere,
        ]);
        assert_fails(&out, transport, "cannot write the plot to");
        assert!(out.stdout.is_empty(), "{transport}: measured anyway");
    }
    let out = hccl_test(&[
        "all_reduce",
        "-p",
        "2",
        "-b",
        "8",
        "-e",
        "8",
        "--plot",
        &dir.path(""),
    ]);
    assert_fails(&out, "a directory", "is a directory");
    assert!(!Path::new(&nowhere).exists());

    let good = dir.path("good.json");
    std::fs::write(&good, rows("X", 1.0)).unwrap();
    let out = hccl_plot(&["-o", &nowhere, &good]);
    assert_fails(&out, "hccl-plot unwritable", "cannot write the plot to");
    let empty = dir.path("empty.json");
    std::fs::write(&empty, "\n").unwrap();
    let out = hccl_plot(&["-o", &dir.path("e.svg"), &good, &empty]);
    assert_fails(&out, "empty input", "empty.json holds no rows");
    let garbled = dir.path("garbled.json");
    std::fs::write(&garbled, rows("X", 1.0) + "{\"bytes\": 8, \"ti").unwrap();
    let out = hccl_plot(&["-o", &dir.path("g.svg"), &garbled]);
    assert_fails(&out, "garbled input", "garbled.json line 4: not JSON");
    let table = dir.path("table.json");
    std::fs::write(&table, "{\"op\": \"all_reduce\"}\n").unwrap();
    let out = hccl_plot(&["-o", &dir.path("t.svg"), &table]);
    assert_fails(&out, "wrong shape", "not a row of hccl-test --format json");
    let out = hccl_plot(&["-o", &dir.path("m.svg"), &dir.path("missing.json")]);
    assert_fails(&out, "missing input", "missing.json");
    let out = hccl_plot(&[
        "-o",
        &dir.path("l.svg"),
        "--label",
        "a",
        "--label",
        "b",
        &good,
    ]);
    assert_fails(&out, "too many labels", "one per file at most");
    for f in ["e.svg", "g.svg", "t.svg", "m.svg", "l.svg"] {
        assert!(!Path::new(&dir.path(f)).exists(), "{f} was left behind");
    }
}
