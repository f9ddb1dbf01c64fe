//! The fused ops of the C API (`HcclRsMatmulReduceScatter`,
//! `HcclRsAllGatherMatmul`, `HcclRsMatmulAllReduce`) at p = 2 (threads as
//! ranks), checked against host references: odd shapes, padded leading
//! dimensions, aclrtMalloc and plain host memory, fp32 and bf16, operands
//! produced by earlier work on the stream, and errors by code on every rank.

mod common;
use common::*;
use hccl::acl::*;
use hccl::hccl::*;
use hccl::last_error_message;
use hccl::types::*;
use std::ffi::c_void;
use std::ptr::null_mut;

const E_PARA: u32 = 1;
const E_PTR: u32 = 2;
const INT32: u32 = 2;
const FP32: u32 = 4;
const BF16: u32 = 11;

fn dev_zeroed(bytes: usize) -> *mut c_void {
    let mut p = null_mut();
    acl_ok(aclrtMalloc(&mut p, bytes.max(1), 0), "aclrtMalloc");
    p
}

/// Rank `r`'s `rows × cols` matrix `which` in a buffer with leading
/// dimension `ld` (padding holds NaN, which must never be read): small
/// integers, so every product and sum is exact in f32 (and in bf16).
fn mat(which: u32, r: u32, rows: usize, cols: usize, ld: usize) -> Vec<f32> {
    let mut v = vec![f32::NAN; if rows == 0 { 0 } else { (rows - 1) * ld + cols }];
    for i in 0..rows {
        for j in 0..cols {
            v[i * ld + j] =
                ((i * 7 + j * 3 + which as usize * 5 + r as usize * 11) % 9) as f32 - 4.0;
        }
    }
    v
}

/// `a (m×k, lda) · b (k×n, ldb)`, dense m×n.
fn matmul(a: &[f32], b: &[f32], m: usize, k: usize, n: usize, lda: usize, ldb: usize) -> Vec<f32> {
    let mut c = vec![0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k).map(|t| a[i * lda + t] * b[t * ldb + j]).sum();
        }
    }
    c
}

/// Rows `r0..r0+rows` of the dense `c` (n columns) against `got` (leading
/// dimension `ld`).
fn check_rows(got: &[f32], c: &[f32], r0: usize, rows: usize, n: usize, ld: usize, what: &str) {
    for i in 0..rows {
        for j in 0..n {
            assert_eq!(
                got[i * ld + j],
                c[(r0 + i) * n + j],
                "{what}: element ({i}, {j})"
            );
        }
    }
}

fn split_rows(m: usize, p: usize, r: usize) -> (usize, usize) {
    let (q, extra) = (m / p, m % p);
    (r * q + r.min(extra), q + usize::from(r < extra))
}

fn bf16_of(v: &[f32]) -> Vec<u16> {
    v.iter().map(|x| (x.to_bits() >> 16) as u16).collect()
}

fn f32_of(v: &[u16]) -> Vec<f32> {
    v.iter()
        .map(|&x| f32::from_bits((x as u32) << 16))
        .collect()
}

#[test]
fn matmul_reduce_scatter_fp32_at_2_ranks_with_padding_and_stream_order() {
    let p = 2u32;
    // m large enough for several blocks (the pipelined window path)
    let (m, k, n) = (301usize, 19usize, 23usize);
    let (lda, ldb, ldc) = (k + 3, n + 1, n + 5);
    let sum = {
        let parts: Vec<Vec<f32>> = (0..p)
            .map(|q| {
                matmul(
                    &mat(0, q, m, k, lda),
                    &mat(1, q, k, n, ldb),
                    m,
                    k,
                    n,
                    lda,
                    ldb,
                )
            })
            .collect();
        (0..m * n)
            .map(|i| parts.iter().map(|c| c[i]).sum())
            .collect::<Vec<f32>>()
    };
    per_rank(p, |r, comm, stream| {
        let host_a = mat(0, r, m, k, lda);
        // A arrives by an async copy on the stream: the op must wait for it
        let a = dev_zeroed(4 * host_a.len());
        acl_ok(
            aclrtMemcpyAsync(
                a,
                4 * host_a.len(),
                host_a.as_ptr().cast(),
                4 * host_a.len(),
                1,
                stream,
            ),
            "aclrtMemcpyAsync",
        );
        // B in plain host memory (not aclrtMalloc)
        let b = mat(1, r, k, n, ldb);
        let (r0, rows) = split_rows(m, p as usize, r as usize);
        assert_eq!(rows, if r == 0 { 151 } else { 150 });
        let out = dev_from(&vec![-7f32; (rows - 1) * ldc + n]);
        ok(
            HcclRsMatmulReduceScatter(
                a,
                b.as_ptr().cast(),
                out,
                m as u64,
                k as u64,
                n as u64,
                lda as u64,
                ldb as u64,
                ldc as u64,
                FP32,
                comm,
                stream,
            ),
            "HcclRsMatmulReduceScatter",
        );
        // done on return: no synchronize needed before reading
        let got = to_host::<f32>(out, (rows - 1) * ldc + n);
        check_rows(&got, &sum, r0, rows, n, ldc, "matmul_reduce_scatter");
        // the padding of `out` is untouched
        assert!(got[n..ldc].iter().all(|&v| v == -7.0));
    });
}

#[test]
fn all_gather_matmul_with_uneven_shards_and_the_gathered_a() {
    let p = 2u32;
    let (k, n) = (13usize, 17usize);
    let shard = |r: u32| if r == 0 { 70usize } else { 41 };
    let total = shard(0) + shard(1);
    let gathered: Vec<f32> = (0..p).flat_map(|q| mat(0, q, shard(q), k, k)).collect();
    per_rank(p, |r, comm, stream| {
        let m = shard(r);
        let a = dev_from(&mat(0, r, m, k, k));
        // B is the same on every rank
        let hb = mat(1, 0, k, n, n);
        let b = dev_from(&hb);
        let want = matmul(&gathered, &hb, total, k, n, k, n);
        let (ldc, ldg) = (n + 2, k + 1);
        let out = dev_zeroed(4 * total * ldc);
        let g = dev_zeroed(4 * total * ldg);
        ok(
            HcclRsAllGatherMatmul(
                a, b, out, g, m as u64, k as u64, n as u64, k as u64, n as u64, ldc as u64,
                ldg as u64, FP32, comm, stream,
            ),
            "HcclRsAllGatherMatmul",
        );
        check_rows(
            &to_host::<f32>(out, total * ldc),
            &want,
            0,
            total,
            n,
            ldc,
            "all_gather_matmul",
        );
        check_rows(
            &to_host::<f32>(g, total * ldg),
            &gathered,
            0,
            total,
            k,
            ldg,
            "gathered A",
        );
        // without the gathered A (NULL; ldg ignored)
        let out2 = dev_zeroed(4 * total * n);
        ok(
            HcclRsAllGatherMatmul(
                a,
                b,
                out2,
                null_mut(),
                m as u64,
                k as u64,
                n as u64,
                k as u64,
                n as u64,
                n as u64,
                0,
                FP32,
                comm,
                stream,
            ),
            "HcclRsAllGatherMatmul without gatheredA",
        );
        check_rows(
            &to_host::<f32>(out2, total * n),
            &want,
            0,
            total,
            n,
            n,
            "all_gather_matmul 2",
        );
    });
}

#[test]
fn matmul_all_reduce_bf16() {
    let p = 2u32;
    let (m, k, n) = (75usize, 7usize, 9usize);
    let sum = {
        let parts: Vec<Vec<f32>> = (0..p)
            .map(|q| matmul(&mat(0, q, m, k, k), &mat(1, q, k, n, n), m, k, n, k, n))
            .collect();
        (0..m * n)
            .map(|i| parts.iter().map(|c| c[i]).sum())
            .collect::<Vec<f32>>()
    };
    per_rank(p, |r, comm, stream| {
        let a = dev_from(&bf16_of(&mat(0, r, m, k, k)));
        let b = dev_from(&bf16_of(&mat(1, r, k, n, n)));
        let out = dev_zeroed(2 * m * n);
        ok(
            HcclRsMatmulAllReduce(
                a, b, out, m as u64, k as u64, n as u64, k as u64, n as u64, n as u64, BF16, comm,
                stream,
            ),
            "HcclRsMatmulAllReduce",
        );
        // integers below 256: exact in bf16
        assert_eq!(
            f32_of(&to_host::<u16>(out, m * n)),
            sum,
            "matmul_all_reduce bf16"
        );
    });
}

#[test]
fn errors_fail_every_rank_and_the_next_op_still_works() {
    let p = 2u32;
    let (m, k, n) = (6usize, 4usize, 5usize);
    per_rank(p, |r, comm, stream| {
        let a = dev_from(&mat(0, r, m, k, k));
        let b = dev_from(&mat(1, r, k, n, n));
        let out = dev_zeroed(4 * m * n);
        let call = |a: *const c_void, out: *mut c_void, kk: usize, ldc: usize, dt: u32| {
            HcclRsMatmulAllReduce(
                a, b, out, m as u64, kk as u64, n as u64, k as u64, n as u64, ldc as u64, dt, comm,
                stream,
            )
        };
        // rank 1 passes a NULL output: E_PTR there, E_PARA naming it on rank 0
        let code = call(a, if r == 1 { null_mut() } else { out }, k, n, FP32);
        let msg = last_error_message().unwrap_or_default();
        if r == 1 {
            assert_eq!(code, E_PTR, "{msg}");
            assert!(msg.contains("out is null"), "{msg}");
        } else {
            assert_eq!(code, E_PARA, "{msg}");
            assert!(msg.contains("rank(s) [1] refused"), "{msg}");
        }
        // an unsupported type on every rank
        assert_eq!(call(a, out, k, n, INT32), E_PARA);
        assert!(last_error_message().unwrap().contains("fused ops take"));
        // ldc < n
        assert_eq!(call(a, out, k, n - 1, FP32), E_PARA);
        assert!(last_error_message().unwrap().contains("ldc 4 is smaller"));
        // K differs across ranks (rank 1 says 3): every rank refuses
        let code = call(a, out, if r == 1 { 3 } else { k }, n, FP32);
        let msg = last_error_message().unwrap_or_default();
        assert_eq!(code, E_PARA, "{msg}");
        assert!(msg.contains("ranks disagree on K"), "{msg}");
        // a NULL communicator: E_PTR at once (no peer involved)
        assert_eq!(
            HcclRsMatmulReduceScatter(
                a,
                b,
                out,
                m as u64,
                k as u64,
                n as u64,
                k as u64,
                n as u64,
                n as u64,
                FP32,
                null_mut(),
                stream,
            ),
            E_PTR
        );
        // after all that, the op runs
        ok(
            call(a, out, k, n, FP32),
            "HcclRsMatmulAllReduce after errors",
        );
        let parts: Vec<Vec<f32>> = (0..p)
            .map(|q| matmul(&mat(0, q, m, k, k), &mat(1, q, k, n, n), m, k, n, k, n))
            .collect();
        let want: Vec<f32> = (0..m * n)
            .map(|i| parts.iter().map(|c| c[i]).sum())
            .collect();
        assert_eq!(to_host::<f32>(out, m * n), want);
    });
}

#[test]
fn a_rank_with_no_rows_passes_null() {
    // m = 1 at p = 2: rank 1 gets no rows of the MatMul+ReduceScatter
    // (its out may be NULL), and its AllGather+MatMul shard is empty
    let p = 2u32;
    let (k, n) = (3usize, 4usize);
    per_rank(p, |r, comm, stream| {
        let a0 = mat(0, 0, 1, k, k);
        let a1 = mat(0, 1, 1, k, k);
        let bh = mat(1, 0, k, n, n);
        let a = dev_from(if r == 0 { &a0 } else { &a1 });
        let b = dev_from(&bh);
        let out = if r == 0 {
            dev_zeroed(4 * n)
        } else {
            null_mut()
        };
        ok(
            HcclRsMatmulReduceScatter(
                a, b, out, 1, k as u64, n as u64, k as u64, n as u64, n as u64, FP32, comm, stream,
            ),
            "HcclRsMatmulReduceScatter with an empty share",
        );
        if r == 0 {
            let want: Vec<f32> = (0..n)
                .map(|j| (0..k).map(|t| (a0[t] + a1[t]) * bh[t * n + j]).sum())
                .collect();
            assert_eq!(to_host::<f32>(out, n), want);
        }
        // AllGather+MatMul: rank 1's shard is empty (NULL)
        let shard = if r == 0 { a } else { null_mut() };
        let m = if r == 0 { 1 } else { 0 };
        let out = dev_zeroed(4 * n);
        ok(
            HcclRsAllGatherMatmul(
                shard,
                b,
                out,
                null_mut(),
                m,
                k as u64,
                n as u64,
                k as u64,
                n as u64,
                n as u64,
                0,
                FP32,
                comm,
                stream,
            ),
            "HcclRsAllGatherMatmul with an empty shard",
        );
        let want: Vec<f32> = (0..n)
            .map(|j| (0..k).map(|t| a0[t] * bh[t * n + j]).sum())
            .collect();
        assert_eq!(to_host::<f32>(out, n), want);
    });
}

#[test]
fn a_capturing_stream_is_refused_and_its_capture_invalidated() {
    per_rank(2, |r, comm, stream| {
        let (m, k, n) = (4usize, 3usize, 2usize);
        let a = dev_from(&mat(0, r, m, k, k));
        let b = dev_from(&mat(1, r, k, n, n));
        let out = dev_zeroed(4 * m * n);
        acl_ok(
            aclmdlRICaptureBegin(stream, ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL),
            "aclmdlRICaptureBegin",
        );
        let code = HcclRsMatmulAllReduce(
            a, b, out, m as u64, k as u64, n as u64, k as u64, n as u64, n as u64, FP32, comm,
            stream,
        );
        assert_eq!(code, 5, "{:?}", last_error_message());
        assert!(last_error_message().unwrap().contains("cannot be captured"));
        let mut ri = null_mut();
        assert_eq!(
            aclmdlRICaptureEnd(stream, &mut ri),
            ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED
        );
        // the stream works again, and so does the op
        ok(
            HcclRsMatmulAllReduce(
                a, b, out, m as u64, k as u64, n as u64, k as u64, n as u64, n as u64, FP32, comm,
                stream,
            ),
            "HcclRsMatmulAllReduce after the capture",
        );
    });
}
