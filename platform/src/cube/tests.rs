use super::*;
use half::{bf16, f16};

fn buf(v: &[f32]) -> DeviceMem {
    let m = DeviceMem::alloc(v.len() * 4).unwrap();
    m.copy_from_host(v).unwrap();
    m
}

fn naive(a: &[f32], b: &[f32], m: usize, k: usize, n: usize, lda: usize, ldb: usize) -> Vec<f32> {
    let mut c = vec![0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut s = 0f64;
            for l in 0..k {
                s += a[i * lda + l] as f64 * b[l * ldb + j] as f64;
            }
            c[i * n + j] = s as f32;
        }
    }
    c
}

fn pattern(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 1000) as f32 / 500.0 - 1.0
        })
        .collect()
}

#[test]
fn gemm_with_leading_dimensions_matches_a_naive_product() {
    // odd sizes, every operand padded
    let (m, k, n, lda, ldb, ldc) = (37, 53, 29, 60, 31, 33);
    let a = pattern(m * lda, 1);
    let b = pattern(k * ldb, 2);
    let want = naive(&a, &b, m, k, n, lda, ldb);
    let (am, bm) = (buf(&a), buf(&b));
    let cm = buf(&vec![7.0; m * ldc]);
    for threads in [1, 2] {
        let c = Mat::new(&cm, DataType::Fp32, m, n, ldc).unwrap();
        let am = Mat::new(&am, DataType::Fp32, m, k, lda).unwrap();
        let bm = Mat::new(&bm, DataType::Fp32, k, n, ldb).unwrap();
        gemm(&c, &am, &bm, false, threads).unwrap();
        let got: Vec<f32> = cm.to_vec(m * ldc).unwrap();
        for i in 0..m {
            for j in 0..n {
                let (g, w) = (got[i * ldc + j], want[i * n + j]);
                assert!(
                    (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
                    "({i},{j}) {g} vs {w}"
                );
            }
            // the padding between rows is untouched
            assert!(got[i * ldc + n..(i + 1) * ldc].iter().all(|&x| x == 7.0) || i == m - 1);
        }
        // accumulate doubles it
        gemm(&c, &am, &bm, true, threads).unwrap();
        let got2: Vec<f32> = cm.to_vec(m * ldc).unwrap();
        assert!((got2[5 * ldc + 3] - 2.0 * want[5 * n + 3]).abs() < 1e-3);
    }
}

#[test]
fn bad_operands_are_typed_errors() {
    let m = DeviceMem::alloc(64 * 4).unwrap();
    let e = Mat::new(&m, DataType::Fp32, 8, 9, 8).unwrap_err();
    assert!(
        e.to_string().contains("leading dimension 8 is smaller"),
        "{e}"
    );
    let e = Mat::new(&m, DataType::Fp32, 9, 8, 8).unwrap_err();
    assert!(e.to_string().contains("needs 288 bytes"), "{e}");
    let a = Mat::new(&m, DataType::Fp32, 4, 4, 4).unwrap();
    let b = Mat::new(&m.range(64, 64).unwrap(), DataType::Fp32, 4, 4, 4).unwrap();
    let c = Mat::new(&m.range(128, 64).unwrap(), DataType::Fp32, 4, 3, 4).unwrap();
    let e = gemm(&c, &a, &b, false, 1).unwrap_err();
    assert!(e.to_string().contains("do not chain"), "{e}");
    let e = gemm(&a, &a.rows(0, 4).unwrap(), &b, false, 1).unwrap_err();
    assert!(e.to_string().contains("overlaps"), "{e}");
    let h = Mat::new(&m, DataType::Bf16, 4, 4, 4).unwrap();
    let e = gemm(&c, &h, &b, false, 1).unwrap_err();
    assert!(e.to_string().contains("convert first"), "{e}");
    let e = Mat::new(&m.range(1, 16).unwrap(), DataType::Fp32, 1, 2, 2).unwrap_err();
    assert!(e.to_string().contains("aligned"), "{e}");
    let i = Mat::new(&m, DataType::Int32, 2, 2, 2).unwrap();
    let e = convert(&b.rows(0, 2).unwrap().cols(0, 2).unwrap(), &i).unwrap_err();
    assert!(
        e.to_string().contains("int32") || e.to_string().contains("INT32"),
        "{e}"
    );
}

#[test]
fn add_and_convert_work_on_strided_blocks() {
    let (r, c, ld) = (5, 7, 9);
    let x = pattern(r * ld, 3);
    let y = pattern(r * ld, 4);
    let (xm, ym) = (buf(&x), buf(&y));
    let xv = Mat::new(&xm, DataType::Fp32, r, c, ld).unwrap();
    let yv = Mat::new(&ym, DataType::Fp32, r, c, ld).unwrap();
    add(&xv, &yv).unwrap();
    let got: Vec<f32> = xm.to_vec(r * ld).unwrap();
    for i in 0..r {
        for j in 0..ld {
            let want = if j < c {
                x[i * ld + j] + y[i * ld + j]
            } else {
                x[i * ld + j]
            };
            assert_eq!(got[i * ld + j], want);
        }
    }
    // f32 -> bf16 -> f32 and f32 -> f16 -> f32 round to the nearest
    for dt in [DataType::Bf16, DataType::Fp16] {
        let hm = DeviceMem::alloc(r * c * 2).unwrap();
        let hv = Mat::new(&hm, dt, r, c, c).unwrap();
        convert(&hv, &yv).unwrap();
        let back = DeviceMem::alloc(r * c * 4).unwrap();
        let bv = Mat::new(&back, DataType::Fp32, r, c, c).unwrap();
        convert(&bv, &hv).unwrap();
        let got: Vec<f32> = back.to_vec(r * c).unwrap();
        for i in 0..r {
            for j in 0..c {
                let v = y[i * ld + j];
                let want = match dt {
                    DataType::Bf16 => bf16::from_f32(v).to_f32(),
                    _ => f16::from_f32(v).to_f32(),
                };
                assert_eq!(got[i * c + j], want);
            }
        }
    }
}
