//! In-place AllGather(V) and ReduceScatter(V) through the C API (issue
//! 31), at p = 2, 3, 4 with threads as ranks: `sendBuf` as this rank's
//! block of `recvBuf` (gathers) or `recvBuf` as this rank's block of
//! `sendBuf` (reduce-scatters), as NCCL and `MPI_IN_PLACE` allow, on
//! aclrtMalloc memory and on plain host memory; every element checked; a
//! misplaced block refused with HCCL_E_PARA and a message saying where the
//! block must be.

mod common;
use common::*;
use hccl::acl::*;
use hccl::hccl::*;
use hccl::last_error_message;
use std::ffi::c_void;

const E_PARA: u32 = 1;
const INT32: u32 = 2;
const SUM: u32 = 0;

fn val(r: usize, i: usize) -> i32 {
    ((r * 7919 + i * 13) % 100_003) as i32
}

/// A buffer of `data`: aclrtMalloc memory, or host memory the caller owns
/// (returned so it lives as long as the op).
fn buffer(data: &[i32], device: bool) -> (*mut c_void, Vec<i32>) {
    if device {
        (dev_from(data), Vec::new())
    } else {
        let mut v = data.to_vec();
        (v.as_mut_ptr().cast(), v)
    }
}

fn read(p: *const c_void, n: usize, device: bool) -> Vec<i32> {
    if device {
        to_host(p, n)
    } else {
        // SAFETY: `p` is the caller's host buffer of at least `n` i32s,
        // the op on it has completed (the stream was synchronized)
        unsafe { std::slice::from_raw_parts(p as *const i32, n).to_vec() }
    }
}

fn release(p: *mut c_void, device: bool) {
    if device {
        acl_ok(aclrtFree(p), "aclrtFree");
    }
}

fn every_form(p: u32, device: bool) {
    per_rank(p, |r, comm, s| {
        let (r, pu) = (r as usize, p as usize);
        for c in [1usize, 1003, 300_001] {
            // AllGather: sendBuf = recvBuf + rank × sendCount
            let mut init = vec![-1i32; pu * c];
            for i in 0..c {
                init[r * c + i] = val(r, i);
            }
            let (buf, _keep) = buffer(&init, device);
            // SAFETY: r × c elements in, within the buffer of p × c
            let mine = unsafe { buf.cast::<i32>().add(r * c) }.cast::<c_void>();
            ok(
                HcclAllGather(mine, buf, c as u64, INT32, comm, s),
                "HcclAllGather in place",
            );
            acl_ok(aclrtSynchronizeStream(s), "sync");
            let want: Vec<i32> = (0..pu)
                .flat_map(|q| (0..c).map(move |i| val(q, i)))
                .collect();
            assert!(
                read(buf, pu * c, device) == want,
                "AllGather p={p} c={c} rank {r}"
            );
            release(buf, device);

            // ReduceScatter: recvBuf = sendBuf + rank × recvCount
            let input: Vec<i32> = (0..pu * c).map(|i| val(r, i)).collect();
            let (buf, _keep) = buffer(&input, device);
            // SAFETY: as above
            let mine = unsafe { buf.cast::<i32>().add(r * c) }.cast::<c_void>();
            ok(
                HcclReduceScatter(buf, mine, c as u64, INT32, SUM, comm, s),
                "HcclReduceScatter in place",
            );
            acl_ok(aclrtSynchronizeStream(s), "sync");
            let got = read(buf, pu * c, device);
            let want: Vec<i32> = (0..c)
                .map(|i| (0..pu).map(|q| val(q, r * c + i)).sum())
                .collect();
            assert!(
                got[r * c..(r + 1) * c] == want,
                "ReduceScatter p={p} c={c} rank {r}"
            );
            release(buf, device);

            // the V forms, uneven blocks with gaps
            let counts: Vec<u64> = (0..pu).map(|q| (c + q * 5) as u64).collect();
            let displs: Vec<u64> = counts
                .iter()
                .scan(0u64, |at, &n| {
                    let d = *at;
                    *at += n + 3;
                    Some(d)
                })
                .collect();
            let total = (displs[pu - 1] + counts[pu - 1] + 3) as usize;
            let (off, n) = (displs[r] as usize, counts[r] as usize);
            let mut init = vec![-1i32; total];
            for i in 0..n {
                init[off + i] = val(r, i);
            }
            let (buf, _keep) = buffer(&init, device);
            // SAFETY: displs[r] + counts[r] ≤ total
            let mine = unsafe { buf.cast::<i32>().add(off) }.cast::<c_void>();
            ok(
                HcclAllGatherV(
                    mine,
                    n as u64,
                    buf,
                    counts.as_ptr().cast(),
                    displs.as_ptr().cast(),
                    INT32,
                    comm,
                    s,
                ),
                "HcclAllGatherV in place",
            );
            acl_ok(aclrtSynchronizeStream(s), "sync");
            let got = read(buf, total, device);
            for q in 0..pu {
                let d = displs[q] as usize;
                let want: Vec<i32> = (0..counts[q] as usize).map(|i| val(q, i)).collect();
                assert!(
                    got[d..d + want.len()] == want,
                    "AllGatherV p={p} c={c} block {q}"
                );
            }
            release(buf, device);

            let input: Vec<i32> = (0..total).map(|i| val(r, i)).collect();
            let (buf, _keep) = buffer(&input, device);
            // SAFETY: as above
            let mine = unsafe { buf.cast::<i32>().add(off) }.cast::<c_void>();
            ok(
                HcclReduceScatterV(
                    buf,
                    counts.as_ptr().cast(),
                    displs.as_ptr().cast(),
                    mine,
                    n as u64,
                    INT32,
                    SUM,
                    comm,
                    s,
                ),
                "HcclReduceScatterV in place",
            );
            acl_ok(aclrtSynchronizeStream(s), "sync");
            let got = read(buf, total, device);
            let want: Vec<i32> = (0..n)
                .map(|i| (0..pu).map(|q| val(q, off + i)).sum())
                .collect();
            assert!(
                got[off..off + n] == want,
                "ReduceScatterV p={p} c={c} rank {r}"
            );
            release(buf, device);
        }
    });
}

#[test]
fn device_memory_p2_p3_p4() {
    for p in [2, 3, 4] {
        every_form(p, true);
    }
}

#[test]
fn host_memory_p2_p3_p4() {
    for p in [2, 3, 4] {
        every_form(p, false);
    }
}

#[test]
fn a_misplaced_block_is_refused() {
    per_rank(2, |r, comm, s| {
        if r != 1 {
            return; // rank 1 alone: nothing is enqueued, nothing to match
        }
        for device in [true, false] {
            let (buf, _keep) = buffer(&[0i32; 8], device);
            // rank 1's block is elements 4..8; hand it 2..6
            // SAFETY: 2 + 4 ≤ 8
            let wrong = unsafe { buf.cast::<i32>().add(2) }.cast::<c_void>();
            assert_eq!(HcclAllGather(wrong, buf, 4, INT32, comm, s), E_PARA);
            let msg = last_error_message().unwrap_or_default();
            assert!(
                msg.contains(
                    "sendBuf must be exactly this rank's block of recvBuf (bytes [16, 32)"
                ),
                "{msg}"
            );
            assert_eq!(
                HcclReduceScatter(buf, wrong, 4, INT32, SUM, comm, s),
                E_PARA
            );
            let msg = last_error_message().unwrap_or_default();
            assert!(
                msg.contains("recvBuf must be exactly this rank's block of sendBuf"),
                "{msg}"
            );
            acl_ok(aclrtSynchronizeStream(s), "nothing was enqueued");
            release(buf, device);
        }
    });
}
