//! Operands and references shared by the fused-op tests.
#![allow(dead_code)]

use half::{bf16, f16};
use hccl_adapter::{DataType, DeviceMem};
use hccl_fused::Mat;

/// Deterministic values in [-1, 1) that differ by rank and operand.
pub fn values(n: usize, seed: u64) -> Vec<f32> {
    (0..n as u64)
        .map(|i| {
            let x = (i ^ (seed << 32)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
            (x % 2000) as f32 / 1000.0 - 1.0
        })
        .collect()
}

/// `v` rounded to `dt` (what the operand really holds).
pub fn rounded(v: &[f32], dt: DataType) -> Vec<f32> {
    v.iter()
        .map(|&x| match dt {
            DataType::Bf16 => bf16::from_f32(x).to_f32(),
            DataType::Fp16 => f16::from_f32(x).to_f32(),
            _ => x,
        })
        .collect()
}

/// A `rows × cols` matrix with leading dimension `ld` holding `v`
/// (row-major, `rows × cols` values) in `dt`; padding is NaN so a read
/// of it shows.
pub fn matrix(v: &[f32], rows: usize, cols: usize, ld: usize, dt: DataType) -> Mat {
    let mem = DeviceMem::alloc((rows * ld).max(1) * dt.size()).unwrap();
    let mut full = vec![f32::NAN; rows * ld];
    for i in 0..rows {
        full[i * ld..i * ld + cols].copy_from_slice(&v[i * cols..(i + 1) * cols]);
    }
    write(&mem, &full, dt);
    Mat::new(&mem, dt, rows, cols, ld).unwrap()
}

fn write(mem: &DeviceMem, v: &[f32], dt: DataType) {
    match dt {
        DataType::Fp32 => mem.copy_from_host(v).unwrap(),
        DataType::Bf16 => {
            let h: Vec<bf16> = v.iter().map(|&x| bf16::from_f32(x)).collect();
            mem.copy_from_host(&h).unwrap()
        }
        DataType::Fp16 => {
            let h: Vec<f16> = v.iter().map(|&x| f16::from_f32(x)).collect();
            mem.copy_from_host(&h).unwrap()
        }
        _ => panic!("test operands are floats"),
    }
}

/// The `rows × cols` values of `m` as f32.
pub fn read(m: &Mat) -> Vec<f32> {
    let (rows, cols, ld) = (m.row_count(), m.col_count(), m.ld());
    let n = if rows == 0 { 0 } else { (rows - 1) * ld + cols };
    let full: Vec<f32> = match m.dtype() {
        DataType::Fp32 => m.mem().to_vec::<f32>(n).unwrap(),
        DataType::Bf16 => m
            .mem()
            .to_vec::<bf16>(n)
            .unwrap()
            .iter()
            .map(|x| x.to_f32())
            .collect(),
        DataType::Fp16 => m
            .mem()
            .to_vec::<f16>(n)
            .unwrap()
            .iter()
            .map(|x| x.to_f32())
            .collect(),
        _ => panic!("test operands are floats"),
    };
    (0..rows)
        .flat_map(|i| full[i * ld..i * ld + cols].to_vec())
        .collect()
}

/// `a · b` in f64 (a: m×k, b: k×n, dense).
pub fn product(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut c = vec![0f64; m * n];
    for i in 0..m {
        for l in 0..k {
            let x = a[i * k + l] as f64;
            for j in 0..n {
                c[i * n + j] += x * b[l * n + j] as f64;
            }
        }
    }
    c
}

/// Tolerance for a result of type `dt` from sums of `terms` products of
/// values in [-1, 1]: f32 accumulation, then rounding to `dt`.
pub fn tolerance(dt: DataType, terms: usize) -> f64 {
    // inputs are rounded the same way in the reference, so the error is
    // f32 accumulation plus one rounding of the result
    let acc = 1e-6 * terms as f64;
    match dt {
        DataType::Fp32 => acc,
        DataType::Bf16 => acc + 8e-3,
        _ => acc + 1e-3,
    }
}

/// Asserts `got` matches `want` elementwise within `tol` (relative to
/// magnitude, at least absolute `tol`).
pub fn assert_close(got: &[f32], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let err = (g as f64 - w).abs();
        assert!(
            err <= tol * (1.0 + w.abs()),
            "{what}: element {i}: got {g}, want {w} (tolerance {tol})"
        );
    }
}
