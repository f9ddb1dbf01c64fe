//! The fused ops with ranks as threads: every path, every op, p = 1..4,
//! odd shapes and leading dimensions, fp32/bf16/fp16, against an f64
//! reference from the same (rounded) operands.

mod common;

use common::*;
use hccl_adapter::{CommConfig, DataType, HcclComm};
use hccl_fused::{split_rows, Fused, FusedConfig, FusedPath, Mat};
use std::time::Duration;

/// Runs `f(rank, fused)` on `p` thread ranks, with a watchdog.
fn on_ranks<T: Send + 'static>(
    p: u32,
    cfg: FusedConfig,
    f: impl Fn(u32, &Fused) -> T + Send + Sync + Clone + 'static,
) -> Vec<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let comms = HcclComm::init_all_with(p, CommConfig::default()).unwrap();
        let hs: Vec<_> = comms
            .into_iter()
            .enumerate()
            .map(|(r, c)| {
                let (f, cfg) = (f.clone(), cfg.clone());
                std::thread::spawn(move || f(r as u32, &Fused::with_config(&c, cfg)))
            })
            .collect();
        let out: Vec<T> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        let _ = tx.send(out);
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the ranks finished within 60 s")
}

struct Case {
    m: usize,
    k: usize,
    n: usize,
    dt: DataType,
    path: FusedPath,
    block: Option<usize>,
    stages: usize,
}

fn cfg(c: &Case) -> FusedConfig {
    FusedConfig {
        path: c.path,
        block_rows: c.block,
        stages: c.stages,
        threads: Some(1),
    }
}

/// A_r, B_r as the rank holds them (values already rounded to dt).
fn operands(c: &Case, r: u32, a_rows: usize) -> (Vec<f32>, Vec<f32>) {
    let a = rounded(&values(a_rows * c.k, 100 + r as u64), c.dt);
    let b = rounded(&values(c.k * c.n, 200 + r as u64), c.dt);
    (a, b)
}

fn check_mm_rs(p: u32, c: Case) {
    let (m, k, n, dt) = (c.m, c.k, c.n, c.dt);
    let mut want = vec![0f64; m * n];
    for r in 0..p {
        let (a, b) = operands(&c, r, m);
        for (w, x) in want.iter_mut().zip(product(&a, &b, m, k, n)) {
            *w += x;
        }
    }
    let tol = tolerance(dt, k * p as usize);
    let conf = cfg(&c);
    let c = std::sync::Arc::new(c);
    let got = on_ranks(p, conf, move |r, f| {
        let (a, b) = operands(&c, r, c.m);
        let am = matrix(&a, c.m, c.k, c.k + 3, c.dt);
        let bm = matrix(&b, c.k, c.n, c.n + 1, c.dt);
        let rows = split_rows(c.m, p as usize, r as usize).1;
        let out = matrix(&vec![0.0; rows * c.n], rows, c.n, c.n + 2, c.dt);
        let rep = f.matmul_reduce_scatter(&am, &bm, &out).unwrap();
        // twice: the second op reuses the window and scratch
        let rep2 = f.matmul_reduce_scatter(&am, &bm, &out).unwrap();
        assert_eq!(rep.path, rep2.path);
        (rep, read(&out))
    });
    for (r, (rep, g)) in got.iter().enumerate() {
        let (off, rows) = split_rows(m, p as usize, r);
        assert_close(
            g,
            &want[off * n..(off + rows) * n],
            tol,
            &format!("MM-RS rank {r} {rep:?}"),
        );
    }
}

fn check_ag_mm(p: u32, c: Case) {
    let (k, n, dt) = (c.k, c.n, c.dt);
    // uneven shards: rank r holds m + r rows (rank 0 may hold none)
    let m0 = c.m;
    let shard = move |r: u32| m0 + r as usize;
    let total: usize = (0..p).map(shard).sum();
    let b = rounded(&values(k * n, 300), dt);
    let mut a_all = Vec::new();
    for r in 0..p {
        a_all.extend(operands(&c, r, shard(r)).0);
    }
    let want = product(&a_all, &b, total, k, n);
    let tol = tolerance(dt, k);
    let conf = cfg(&c);
    let c = std::sync::Arc::new(c);
    let got = on_ranks(p, conf, move |r, f| {
        let a = operands(&c, r, shard(r)).0;
        let b = rounded(&values(c.k * c.n, 300), c.dt);
        let am = matrix(&a, shard(r), c.k, c.k + 1, c.dt);
        let bm = matrix(&b, c.k, c.n, c.n, c.dt);
        let out = matrix(&vec![0.0; total * c.n], total, c.n, c.n + 5, c.dt);
        let g = matrix(&vec![0.0; total * c.k], total, c.k, c.k + 2, c.dt);
        f.all_gather_matmul(&am, &bm, &out, Some(&g)).unwrap();
        let rep = f.all_gather_matmul(&am, &bm, &out, Some(&g)).unwrap();
        (rep, read(&out), read(&g))
    });
    for (r, (rep, o, g)) in got.iter().enumerate() {
        assert_close(o, &want, tol, &format!("AG-MM rank {r} {rep:?}"));
        let a64: Vec<f64> = a_all.iter().map(|&x| x as f64).collect();
        assert_close(g, &a64, 0.0, &format!("AG-MM gathered A rank {r}"));
    }
}

fn check_mm_ar(p: u32, c: Case) {
    let (m, k, n, dt) = (c.m, c.k, c.n, c.dt);
    let mut want = vec![0f64; m * n];
    for r in 0..p {
        let (a, b) = operands(&c, r, m);
        for (w, x) in want.iter_mut().zip(product(&a, &b, m, k, n)) {
            *w += x;
        }
    }
    let tol = tolerance(dt, k * p as usize);
    let conf = cfg(&c);
    let c = std::sync::Arc::new(c);
    let got = on_ranks(p, conf, move |r, f| {
        let (a, b) = operands(&c, r, c.m);
        let am = matrix(&a, c.m, c.k, c.k, c.dt);
        let bm = matrix(&b, c.k, c.n, c.n + 7, c.dt);
        let out = matrix(&vec![0.0; c.m * c.n], c.m, c.n, c.n + 1, c.dt);
        f.matmul_all_reduce(&am, &bm, &out).unwrap();
        let rep = f.matmul_all_reduce(&am, &bm, &out).unwrap();
        (rep, read(&out))
    });
    for (r, (rep, g)) in got.iter().enumerate() {
        assert_close(g, &want, tol, &format!("MM-AR rank {r} {rep:?}"));
    }
}

const PATHS: [FusedPath; 3] = [FusedPath::Window, FusedPath::Stream, FusedPath::Unfused];

fn case(m: usize, k: usize, n: usize, dt: DataType, path: FusedPath) -> Case {
    Case {
        m,
        k,
        n,
        dt,
        path,
        block: Some(4),
        stages: 2,
    }
}

#[test]
fn matmul_reduce_scatter_every_path_and_rank_count() {
    for p in 1..=4 {
        for path in PATHS {
            // M not a multiple of p, K and N odd, blocks of 4 rows
            check_mm_rs(
                p,
                case(4 * p as usize * 3 + 1, 37, 19, DataType::Fp32, path),
            );
        }
    }
}

#[test]
fn matmul_reduce_scatter_half_types_and_stage_counts() {
    for dt in [DataType::Bf16, DataType::Fp16] {
        for path in PATHS {
            check_mm_rs(3, case(29, 24, 13, dt, path));
        }
    }
    for stages in [1, 3] {
        let mut c = case(50, 16, 9, DataType::Fp32, FusedPath::Window);
        c.stages = stages;
        check_mm_rs(2, c);
    }
    // fewer rows than ranks, and the automatic choice
    check_mm_rs(4, case(2, 8, 5, DataType::Fp32, FusedPath::Window));
    let mut c = case(333, 20, 7, DataType::Fp32, FusedPath::Auto);
    c.block = None;
    check_mm_rs(3, c);
}

#[test]
fn all_gather_matmul_every_path_and_rank_count() {
    for p in 1..=4 {
        for path in PATHS {
            check_ag_mm(p, case(9, 21, 11, DataType::Fp32, path));
        }
    }
    for dt in [DataType::Bf16, DataType::Fp16] {
        for path in PATHS {
            check_ag_mm(3, case(6, 16, 10, dt, path));
        }
    }
    // a rank with no rows
    check_ag_mm(2, case(0, 8, 3, DataType::Fp32, FusedPath::Window));
}

#[test]
fn matmul_all_reduce_every_path_and_rank_count() {
    for p in 1..=4 {
        for path in PATHS {
            check_mm_ar(p, case(23, 17, 9, DataType::Fp32, path));
        }
    }
    for dt in [DataType::Bf16, DataType::Fp16] {
        check_mm_ar(3, case(14, 12, 6, dt, FusedPath::Window));
    }
    // the phases' lags differ with one, two and three or more stages
    for stages in [1, 3, 4] {
        let mut c = case(41, 10, 7, DataType::Fp32, FusedPath::Window);
        c.stages = stages;
        check_mm_ar(3, c);
    }
}

#[test]
fn bad_operands_are_refused_on_every_rank_before_anything_runs() {
    let conf = FusedConfig {
        path: FusedPath::Window,
        ..FusedConfig::default()
    };
    // rank 1's K differs
    let errs = on_ranks(2, conf.clone(), |r, f| {
        let k = 8 + r as usize;
        let a = matrix(&values(6 * k, 1), 6, k, k, DataType::Fp32);
        let b = matrix(&values(k * 4, 2), k, 4, 4, DataType::Fp32);
        let out = matrix(&[0.0; 12], 3, 4, 4, DataType::Fp32);
        f.matmul_reduce_scatter(&a, &b, &out)
            .unwrap_err()
            .to_string()
    });
    for e in &errs {
        assert!(
            e.contains("ranks disagree on K") && e.contains("8, 9"),
            "{e}"
        );
    }
    // rank 0's output has the wrong row count; rank 1 is fine
    let errs = on_ranks(2, conf.clone(), |r, f| {
        let a = matrix(&values(6 * 4, 1), 6, 4, 4, DataType::Fp32);
        let b = matrix(&values(16, 2), 4, 4, 4, DataType::Fp32);
        let rows = if r == 0 { 2 } else { 3 };
        let out = matrix(&[0.0; 12], rows, 4, 4, DataType::Fp32);
        f.matmul_reduce_scatter(&a, &b, &out)
            .unwrap_err()
            .to_string()
    });
    assert!(
        errs[0].contains("the output has 2 rows; rank 0 of 2 gets 3"),
        "{}",
        errs[0]
    );
    assert!(
        errs[1].contains("rank(s) [0] refused their operands"),
        "{}",
        errs[1]
    );
    // unsupported type, mixed types, and an output overlapping A
    let errs = on_ranks(1, conf, |_, f| {
        let mem = hccl_adapter::DeviceMem::alloc(256).unwrap();
        let i32m = Mat::new(&mem, DataType::Int32, 2, 2, 2).unwrap();
        let e1 = f
            .matmul_all_reduce(&i32m, &i32m, &i32m)
            .unwrap_err()
            .to_string();
        let a = matrix(&values(4, 1), 2, 2, 2, DataType::Fp32);
        let bh = matrix(&values(4, 1), 2, 2, 2, DataType::Bf16);
        let e2 = f.matmul_all_reduce(&a, &bh, &a).unwrap_err().to_string();
        let b = matrix(&values(4, 1), 2, 2, 2, DataType::Fp32);
        let e3 = f.matmul_all_reduce(&a, &b, &a).unwrap_err().to_string();
        let out = matrix(&[0.0; 6], 2, 3, 3, DataType::Fp32);
        let e4 = f
            .all_gather_matmul(&a, &b, &out, None)
            .unwrap_err()
            .to_string();
        [e1, e2, e3, e4]
    });
    let [e1, e2, e3, e4] = &errs[0];
    assert!(e1.contains("fused ops take fp32, bf16 and fp16"), "{e1}");
    assert!(e2.contains("all operands must share one type"), "{e2}");
    assert!(e3.contains("the output overlaps A"), "{e3}");
    assert!(e4.contains("the output has 3 columns, B has 2"), "{e4}");
}

/// Regression: on the stream path the compute side stopped at its first
/// failed hand-back of a stage once the communication thread (which owns
/// the receiving end) had gathered its last block, leaving the peers'
/// later blocks unwritten in about one op in five. Each op here writes
/// fresh outputs (the tests above run twice into the same ones, which
/// hid it), with more blocks than stages and exactly as many.
#[test]
fn all_gather_matmul_writes_every_block_of_every_op() {
    for (rows, block) in [(40usize, 32usize), (100, 32), (9, 4)] {
        let c = Case {
            block: Some(block),
            ..case(rows, 21, 13, DataType::Fp32, FusedPath::Stream)
        };
        let (k, n, p) = (c.k, c.n, 2u32);
        let total = 2 * rows;
        let a_all: Vec<f32> = (0..p).flat_map(|r| operands(&c, r, rows).0).collect();
        let b = values(k * n, 300);
        let want = product(&a_all, &b, total, k, n);
        let conf = cfg(&c);
        let a64: Vec<f64> = a_all.iter().map(|&x| x as f64).collect();
        let a_all = std::sync::Arc::new(a_all);
        let got = on_ranks(p, conf, move |r, f| {
            let r = r as usize;
            let am = matrix(
                &a_all[r * rows * k..(r + 1) * rows * k],
                rows,
                k,
                k,
                DataType::Fp32,
            );
            let bm = matrix(&values(k * n, 300), k, n, n, DataType::Fp32);
            (0..20)
                .map(|_| {
                    let out = matrix(&vec![-99.0; total * n], total, n, n, DataType::Fp32);
                    let g = matrix(&vec![-99.0; total * k], total, k, k, DataType::Fp32);
                    f.all_gather_matmul(&am, &bm, &out, Some(&g)).unwrap();
                    (read(&out), read(&g))
                })
                .collect::<Vec<_>>()
        });
        let tol = tolerance(DataType::Fp32, k);
        for (r, ops) in got.iter().enumerate() {
            for (i, (o, g)) in ops.iter().enumerate() {
                assert_close(
                    o,
                    &want,
                    tol,
                    &format!("rank {r} op {i} ({rows} rows, {block})"),
                );
                assert_close(g, &a64, 0.0, &format!("gathered, rank {r} op {i}"));
            }
        }
    }
}
