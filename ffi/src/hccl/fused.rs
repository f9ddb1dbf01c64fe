//! hccl-rs extensions (`hccl_ex.h`): the fused compute/communication ops
//! of hccl-fused — `HcclRsMatmulReduceScatter`, `HcclRsAllGatherMatmul`
//! and `HcclRsMatmulAllReduce` — over caller memory given by pointer.
//!
//! Each call is stream-ordered the way an HCCL op is, but synchronous:
//! it first waits for the work already enqueued on the given stream
//! (which may produce the operands), then runs the fused op on the
//! calling thread and returns when it is done, so work enqueued on the
//! stream afterwards sees the result. One [`Fused`] per communicator is
//! made at its first fused call and kept with the handle.
//!
//! Every rank joins the op's agreement even when its own arguments are
//! wrong (it then passes operands the fused layer refuses), so a bad
//! argument on one rank fails the op on every rank instead of leaving the
//! peers waiting: the refusing rank returns its own error, the others
//! `HCCL_E_PARA` naming it. Only a bad communicator or stream handle
//! returns at once.

use super::comm::{lookup, CommEntry};
use crate::acl::stream_for_op;
use crate::guard::hccl;
use crate::mem::{resolve, Arg};
use crate::types::*;
use hccl_adapter::{DataType, DeviceMem, HcclError, Result, Stream};
use hccl_fused::{split_rows, Fused, Mat};
use std::ffi::c_void;

/// The three ops.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    MatmulReduceScatter,
    AllGatherMatmul,
    MatmulAllReduce,
}

/// One matrix argument: pointer, shape and leading dimension (elements).
#[derive(Clone, Copy)]
struct MatArg {
    what: &'static str,
    ptr: *const c_void,
    rows: u64,
    cols: u64,
    ld: u64,
    ld_name: &'static str,
}

impl MatArg {
    /// Bytes the matrix spans (checked: `ld >= cols`, no overflow).
    fn span(&self, dt: DataType) -> Result<usize> {
        if self.rows == 0 || self.cols == 0 {
            return Ok(0);
        }
        if self.ld < self.cols {
            return Err(HcclError::para(format!(
                "{} {} is smaller than {}'s {} columns",
                self.ld_name, self.ld, self.what, self.cols
            )));
        }
        (self.rows - 1)
            .checked_mul(self.ld)
            .and_then(|x| x.checked_add(self.cols))
            .and_then(|x| x.checked_mul(dt.size() as u64))
            .and_then(|x| usize::try_from(x).ok())
            .ok_or_else(|| {
                HcclError::para(format!(
                    "{} ({}×{}, {} {}) spans more bytes than the address space holds",
                    self.what, self.rows, self.cols, self.ld_name, self.ld
                ))
            })
    }
}

/// `x` as a `usize` (argument `what`).
fn size(x: u64, what: &str) -> Result<usize> {
    usize::try_from(x).map_err(|_| HcclError::para(format!("{what} {x} is too large")))
}

/// The communicator's fused ops, made at the first call.
fn fused_of(c: &CommEntry) -> Result<&Fused> {
    if let Some(f) = c.fused.get() {
        return Ok(f);
    }
    let f = Fused::new(&c.comm)?;
    // a racing first call may have set it: either one is as good (neither
    // has opened its workspace yet)
    let _ = c.fused.set(f);
    Ok(c.fused.get().expect("set above"))
}

/// This rank's shard rows and every rank's, summed (AllGather+MatMul's
/// output rows): one small AllGather, on every rank whatever its other
/// arguments.
fn total_rows(c: &CommEntry, m: u64) -> Result<u64> {
    let p = c.comm.size() as usize;
    let send = DeviceMem::alloc(8)?;
    send.copy_from_host_bytes(&m.to_le_bytes())?;
    let recv = DeviceMem::alloc(8 * p)?;
    let s = c.comm.create_stream();
    c.comm
        .all_gather_raw(&send, &recv, 8, DataType::Uint8, &s)
        .and_then(|_| s.synchronize())
        .map_err(|e| e.during("exchanging the shards' row counts"))?;
    let mut all = vec![0u8; 8 * p];
    recv.copy_to_host_bytes(&mut all)?;
    all.chunks(8)
        .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
        .try_fold(0u64, |t, x| t.checked_add(x))
        .ok_or_else(|| HcclError::para("the shards' rows overflow when summed"))
}

/// The operands, checked and wrapped: A, B, the output, the gathered A.
fn operands(dt: DataType, args: &[MatArg]) -> Result<Vec<Mat>> {
    if !matches!(dt, DataType::Fp32 | DataType::Bf16 | DataType::Fp16) {
        return Err(HcclError::para(format!(
            "dataType {}: fused ops take HCCL_DATA_TYPE_FP32, BFP16 and FP16",
            dt.name()
        )));
    }
    let mut bufs = Vec::with_capacity(args.len());
    for a in args {
        bufs.push(Arg {
            what: a.what,
            ptr: a.ptr,
            len: a.span(dt)?,
        });
    }
    let mems = resolve(&bufs)?;
    args.iter()
        .zip(&mems)
        .map(|(a, m)| {
            Mat::new(
                m,
                dt,
                size(a.rows, a.what)?,
                size(a.cols, a.what)?,
                size(a.ld, a.ld_name)?,
            )
            .map_err(|e| e.during(a.what))
        })
        .collect()
}

/// Runs `kind` on every rank: the stream's earlier work first, then the
/// op with this rank's operands — or, if they are wrong, with operands
/// the fused layer refuses, so every rank's op fails together.
fn run(
    kind: Kind,
    comm: HcclComm,
    stream: aclrtStream,
    dataType: HcclDataType,
    m: u64,
    mut args: Vec<MatArg>,
) -> Result<()> {
    let c = lookup(comm)?;
    c.check_active()?;
    let s: Stream = stream_for_op(stream, &c.comm.device())?;
    if s.is_capturing() {
        let e = HcclError::not_support(
            "fused ops run synchronously on the calling thread and cannot be captured into a \
             graph; issue them outside the capture",
        );
        s.invalidate_capture(&e);
        return Err(e);
    }
    let fused = fused_of(&c)?;
    let synced = s
        .synchronize()
        .map_err(|e| e.during("completing the stream's earlier work before the fused op"));
    let (p, r) = (c.comm.size() as usize, c.comm.rank() as usize);
    // the output's rows
    let out_rows = match kind {
        Kind::MatmulReduceScatter => size(m, "m").map(|m| split_rows(m, p, r).1 as u64),
        Kind::MatmulAllReduce => Ok(m),
        Kind::AllGatherMatmul => Ok(total_rows(&c, m)?),
    };
    let local = synced.and(out_rows).and_then(|rows| {
        args[2].rows = rows;
        if let Some(g) = args.get_mut(3) {
            g.rows = rows;
        }
        dtype(dataType).and_then(|dt| operands(dt, &args))
    });
    let ops = match local {
        Ok(ops) => ops,
        Err(e) => {
            // join the agreement with operands it refuses (no rank runs
            // the op); this rank's own error is the one to report
            let z = Mat::new(&DeviceMem::null(), DataType::Int8, 0, 0, 0)?;
            let _ = match kind {
                Kind::MatmulReduceScatter => fused.matmul_reduce_scatter(&z, &z, &z),
                Kind::AllGatherMatmul => fused.all_gather_matmul(&z, &z, &z, None),
                Kind::MatmulAllReduce => fused.matmul_all_reduce(&z, &z, &z),
            };
            return Err(e);
        }
    };
    let report = match kind {
        Kind::MatmulReduceScatter => fused.matmul_reduce_scatter(&ops[0], &ops[1], &ops[2]),
        Kind::AllGatherMatmul => fused.all_gather_matmul(&ops[0], &ops[1], &ops[2], ops.get(3)),
        Kind::MatmulAllReduce => fused.matmul_all_reduce(&ops[0], &ops[1], &ops[2]),
    }?;
    tracing::debug!(target: "hccl", path = ?report.path, blocks = report.blocks, "fused op done");
    Ok(())
}

fn dtype(code: HcclDataType) -> Result<DataType> {
    DataType::from_code(code)
}

/// A, B and the output of a MatMul op.
#[allow(clippy::too_many_arguments)]
fn abc(
    a: *const c_void,
    b: *const c_void,
    out: *const c_void,
    m: u64,
    k: u64,
    n: u64,
    lda: u64,
    ldb: u64,
    ldc: u64,
) -> Vec<MatArg> {
    vec![
        MatArg {
            what: "a",
            ptr: a,
            rows: m,
            cols: k,
            ld: lda,
            ld_name: "lda",
        },
        MatArg {
            what: "b",
            ptr: b,
            rows: k,
            cols: n,
            ld: ldb,
            ld_name: "ldb",
        },
        MatArg {
            what: "out",
            ptr: out,
            rows: 0, // set from the op
            cols: n,
            ld: ldc,
            ld_name: "ldc",
        },
    ]
}

/// `HcclRsMatmulReduceScatter`: every rank holds `a` (m×k) and `b` (k×n);
/// rank r receives in `out` its rows of Σ_q A_q·B_q (the first m mod
/// rankSize ranks get ⌈m/rankSize⌉ rows, the others ⌊m/rankSize⌋).
#[no_mangle]
pub extern "C" fn HcclRsMatmulReduceScatter(
    a: *const c_void,
    b: *const c_void,
    out: *mut c_void,
    m: u64,
    k: u64,
    n: u64,
    lda: u64,
    ldb: u64,
    ldc: u64,
    dataType: HcclDataType,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    hccl("HcclRsMatmulReduceScatter", || {
        let args = abc(a, b, out, m, k, n, lda, ldb, ldc);
        run(Kind::MatmulReduceScatter, comm, stream, dataType, m, args)
    })
}

/// `HcclRsAllGatherMatmul`: every rank holds its row shard `a` (m×k, m
/// may differ by rank) and `b` (k×n); every rank receives
/// (A gathered by rows)·B in `out` (Σm × n) and, unless `gatheredA` is
/// NULL, the gathered A (Σm × k, leading dimension `ldg`).
#[no_mangle]
pub extern "C" fn HcclRsAllGatherMatmul(
    a: *const c_void,
    b: *const c_void,
    out: *mut c_void,
    gatheredA: *mut c_void,
    m: u64,
    k: u64,
    n: u64,
    lda: u64,
    ldb: u64,
    ldc: u64,
    ldg: u64,
    dataType: HcclDataType,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    hccl("HcclRsAllGatherMatmul", || {
        let mut args = abc(a, b, out, m, k, n, lda, ldb, ldc);
        if !gatheredA.is_null() {
            args.push(MatArg {
                what: "gatheredA",
                ptr: gatheredA,
                rows: 0, // set from the op
                cols: k,
                ld: ldg,
                ld_name: "ldg",
            });
        }
        run(Kind::AllGatherMatmul, comm, stream, dataType, m, args)
    })
}

/// `HcclRsMatmulAllReduce`: every rank holds `a` (m×k) and `b` (k×n);
/// every rank receives Σ_q A_q·B_q in `out` (m×n).
#[no_mangle]
pub extern "C" fn HcclRsMatmulAllReduce(
    a: *const c_void,
    b: *const c_void,
    out: *mut c_void,
    m: u64,
    k: u64,
    n: u64,
    lda: u64,
    ldb: u64,
    ldc: u64,
    dataType: HcclDataType,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    hccl("HcclRsMatmulAllReduce", || {
        let args = abc(a, b, out, m, k, n, lda, ldb, ldc);
        run(Kind::MatmulAllReduce, comm, stream, dataType, m, args)
    })
}
