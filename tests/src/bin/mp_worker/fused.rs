//! Scenarios of the fused compute/communication ops, one rank per process
//! (`hccl-mp-worker <mode> <rank> <size> <dir> fused_<what>`):
//!
//! - `fused_check`: MatMul+ReduceScatter, AllGather+MatMul (with the
//!   gathered A) and MatMul+AllReduce on an odd shape (M = 3p+1, K = 37,
//!   N = 19), on the window, stream and unfused paths, each result checked
//!   against an f64 reference built from every rank's operands (each rank
//!   regenerates its peers' from their seeds).
//! - `fused_kill`: MatMul+ReduceScatter of 600×400×500 in a loop; after
//!   the first op a rank creates `<dir>/ready.<rank>`; loops until an op
//!   fails (the parent kills a rank meanwhile).

use hccl_adapter::{DataType, DeviceMem, HcclComm, Result};
use hccl_fused::{split_rows, Fused, FusedConfig, FusedPath, Mat};

fn values(n: usize, seed: u64) -> Vec<f32> {
    (0..n as u64)
        .map(|i| {
            let x = (i ^ (seed << 32)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
            (x % 2000) as f32 / 1000.0 - 1.0
        })
        .collect()
}

fn mat(v: &[f32], rows: usize, cols: usize) -> Result<Mat> {
    let mem = DeviceMem::alloc((rows * cols).max(1) * 4)?;
    mem.copy_from_host(v)?;
    Mat::new(&mem, DataType::Fp32, rows, cols, cols)
}

fn product(a: &[f32], b: &[f32], m: usize, k: usize, n: usize, acc: &mut [f64]) {
    for i in 0..m {
        for l in 0..k {
            for j in 0..n {
                acc[i * n + j] += a[i * k + l] as f64 * b[l * n + j] as f64;
            }
        }
    }
}

fn check(what: &str, got: &Mat, want: &[f64]) -> Result<()> {
    let g: Vec<f32> = got.mem().to_vec(want.len())?;
    for (i, (&x, &w)) in g.iter().zip(want).enumerate() {
        if (x as f64 - w).abs() > 1e-4 * (1.0 + w.abs()) {
            return Err(hccl_adapter::HcclError::internal(format!(
                "{what}: element {i} is {x}, want {w}"
            )));
        }
    }
    Ok(())
}

pub fn run(c: &HcclComm, what: &str, dir: &str) -> Result<()> {
    match what {
        "check" => check_all(c),
        "kill" => kill_loop(c, dir),
        other => Err(hccl_adapter::HcclError::para(format!(
            "unknown fused scenario {other}"
        ))),
    }
}

fn check_all(c: &HcclComm) -> Result<()> {
    let (p, r) = (c.size() as usize, c.rank() as usize);
    let (m, k, n) = (3 * p + 1, 37, 19);
    let a_of = |q: usize| values(m * k, 10 + q as u64);
    let b_of = |q: usize| values(k * n, 20 + q as u64);
    let mut sum = vec![0f64; m * n];
    for q in 0..p {
        product(&a_of(q), &b_of(q), m, k, n, &mut sum);
    }
    // AllGather+MatMul: shards of rows split_rows(m, p, q) of one A, one B
    let a_full = values(m * k, 99);
    let b_common = values(k * n, 98);
    let mut ag = vec![0f64; m * n];
    product(&a_full, &b_common, m, k, n, &mut ag);
    let (off, rows) = split_rows(m, p, r);
    for path in [FusedPath::Window, FusedPath::Stream, FusedPath::Unfused] {
        let f = Fused::with_config(
            c,
            FusedConfig {
                path,
                block_rows: Some(2),
                ..FusedConfig::default()
            },
        );
        let (a, b) = (mat(&a_of(r), m, k)?, mat(&b_of(r), k, n)?);
        let out = mat(&vec![0.0; rows * n], rows, n)?;
        f.matmul_reduce_scatter(&a, &b, &out)?;
        check(
            &format!("{path:?} MM-RS"),
            &out,
            &sum[off * n..(off + rows) * n],
        )?;
        let out = mat(&vec![0.0; m * n], m, n)?;
        f.matmul_all_reduce(&a, &b, &out)?;
        check(&format!("{path:?} MM-AR"), &out, &sum)?;
        let shard = mat(&a_full[off * k..(off + rows) * k], rows, k)?;
        let bc = mat(&b_common, k, n)?;
        let gathered = mat(&vec![0.0; m * k], m, k)?;
        f.all_gather_matmul(&shard, &bc, &out, Some(&gathered))?;
        check(&format!("{path:?} AG-MM"), &out, &ag)?;
        let a64: Vec<f64> = a_full.iter().map(|&x| x as f64).collect();
        check(&format!("{path:?} AG-MM gathered A"), &gathered, &a64)?;
    }
    Ok(())
}

fn kill_loop(c: &HcclComm, dir: &str) -> Result<()> {
    let (p, r) = (c.size() as usize, c.rank() as usize);
    let (m, k, n) = (600, 400, 500);
    let f = Fused::with_config(
        c,
        FusedConfig {
            path: FusedPath::Window,
            ..FusedConfig::default()
        },
    );
    let a = mat(&values(m * k, r as u64), m, k)?;
    let b = mat(&values(k * n, 50 + r as u64), k, n)?;
    let rows = split_rows(m, p, r).1;
    let out = mat(&vec![0.0; rows * n], rows, n)?;
    let mut first = true;
    loop {
        f.matmul_reduce_scatter(&a, &b, &out)?;
        if first {
            std::fs::write(format!("{dir}/ready.{r}"), b"")
                .map_err(|e| hccl_adapter::HcclError::from_io("writing the ready file", e))?;
            first = false;
        }
    }
}
