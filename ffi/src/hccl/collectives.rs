//! The collectives and point-to-point calls.

use super::comm::{lookup, CommEntry};
use crate::acl::stream_for_op;
use crate::guard::{hccl, non_null};
use crate::mem::{resolve, Arg};
use crate::types::*;
use hccl_adapter::{DataType, HcclError, ReduceOp, Result, SendRecvItem, SendRecvKind, Stream};
use std::ffi::c_void;
use std::sync::Arc;

/// Bytes of `count` elements of `dtype` (overflow → `HCCL_E_PARA`).
fn bytes(count: u64, dtype: DataType) -> Result<usize> {
    dtype.bytes_of(count)
}

fn dtype(code: HcclDataType) -> Result<DataType> {
    DataType::from_code(code)
}

fn reduce_op(code: HcclReduceOp) -> Result<ReduceOp> {
    ReduceOp::from_code(code)
}

/// The communicator and the platform stream of an op call.
pub(super) fn target(comm: HcclComm, stream: aclrtStream) -> Result<(Arc<CommEntry>, Stream)> {
    let c = lookup(comm)?;
    c.check_active()?;
    let s = stream_for_op(stream, &c.comm.device())?;
    Ok((c, s))
}

fn arg(what: &'static str, ptr: *const c_void, len: usize) -> Arg {
    Arg { what, ptr, len }
}

/// `n` elements from or to every one of `p` ranks (overflow → `HCCL_E_PARA`
/// naming the argument `what`).
fn all_ranks(n: u64, what: &str, p: u32) -> Result<u64> {
    n.checked_mul(p as u64)
        .ok_or_else(|| HcclError::para(format!("{what} {n} × rank size {p} overflows")))
}

/// A V op's layout: rank-sized `uint64_t` arrays of counts and
/// displacements (named `names` in errors), and the elements they span,
/// max(count + displacement).
fn layout(
    counts: *const c_void,
    displs: *const c_void,
    names: (&str, &str),
    p: u32,
) -> Result<(Vec<u64>, Vec<u64>, u64)> {
    let read = |ptr: *const c_void, what: &str| -> Result<Vec<u64>> {
        non_null(ptr, what)?;
        // SAFETY: non-null; HCCL's contract: an array of rankSize uint64_t.
        Ok(unsafe { std::slice::from_raw_parts(ptr.cast::<u64>(), p as usize) }.to_vec())
    };
    let (c, d) = (read(counts, names.0)?, read(displs, names.1)?);
    let span = c.iter().zip(&d).try_fold(0u64, |m, (n, o)| {
        n.checked_add(*o).map(|e| m.max(e)).ok_or_else(|| {
            HcclError::para(format!(
                "{}/{}: count {n} + displacement {o} overflows",
                names.0, names.1
            ))
        })
    })?;
    Ok((c, d, span))
}

/// `HcclAllReduce`.
#[no_mangle]
pub extern "C" fn HcclAllReduce(
    sendBuf: *mut c_void,
    recvBuf: *mut c_void,
    count: u64,
    dataType: HcclDataType,
    op: HcclReduceOp,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    hccl("HcclAllReduce", || {
        let (dt, rop) = (dtype(dataType)?, reduce_op(op)?);
        let (c, s) = target(comm, stream)?;
        let n = bytes(count, dt)?;
        let m = resolve(&[arg("sendBuf", sendBuf, n), arg("recvBuf", recvBuf, n)])?;
        c.comm.all_reduce_raw(&m[0], &m[1], count, dt, rop, &s)
    })
}

/// `HcclBroadcast`.
#[no_mangle]
pub extern "C" fn HcclBroadcast(
    buf: *mut c_void,
    count: u64,
    dataType: HcclDataType,
    root: u32,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    hccl("HcclBroadcast", || {
        let dt = dtype(dataType)?;
        let (c, s) = target(comm, stream)?;
        let m = resolve(&[arg("buf", buf, bytes(count, dt)?)])?;
        c.comm.broadcast_raw(&m[0], count, dt, root, &s)
    })
}

/// `HcclReduceScatter`: `sendBuf` holds rankSize × recvCount elements.
#[no_mangle]
pub extern "C" fn HcclReduceScatter(
    sendBuf: *mut c_void,
    recvBuf: *mut c_void,
    recvCount: u64,
    dataType: HcclDataType,
    op: HcclReduceOp,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    hccl("HcclReduceScatter", || {
        let (dt, rop) = (dtype(dataType)?, reduce_op(op)?);
        let (c, s) = target(comm, stream)?;
        let total = all_ranks(recvCount, "recvCount", c.comm.size())?;
        let m = resolve(&[
            arg("sendBuf", sendBuf, bytes(total, dt)?),
            arg("recvBuf", recvBuf, bytes(recvCount, dt)?),
        ])?;
        c.comm
            .reduce_scatter_raw(&m[0], &m[1], recvCount, dt, rop, &s)
    })
}

/// `HcclReduceScatterV`.
#[no_mangle]
pub extern "C" fn HcclReduceScatterV(
    sendBuf: *mut c_void,
    sendCounts: *const c_void,
    sendDispls: *const c_void,
    recvBuf: *mut c_void,
    recvCount: u64,
    dataType: HcclDataType,
    op: HcclReduceOp,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    hccl("HcclReduceScatterV", || {
        let (dt, rop) = (dtype(dataType)?, reduce_op(op)?);
        let (c, s) = target(comm, stream)?;
        let (counts, displs, span) = layout(
            sendCounts,
            sendDispls,
            ("sendCounts", "sendDispls"),
            c.comm.size(),
        )?;
        let m = resolve(&[
            arg("sendBuf", sendBuf, bytes(span, dt)?),
            arg("recvBuf", recvBuf, bytes(recvCount, dt)?),
        ])?;
        c.comm
            .reduce_scatter_v_raw(&m[0], &counts, &displs, &m[1], recvCount, dt, rop, &s)
    })
}

/// `HcclScatter`: the root's `sendBuf` holds rankSize × recvCount elements.
#[no_mangle]
pub extern "C" fn HcclScatter(
    sendBuf: *mut c_void,
    recvBuf: *mut c_void,
    recvCount: u64,
    dataType: HcclDataType,
    root: u32,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    hccl("HcclScatter", || {
        let dt = dtype(dataType)?;
        let (c, s) = target(comm, stream)?;
        let send_elems = if c.comm.rank() == root {
            all_ranks(recvCount, "recvCount", c.comm.size())?
        } else {
            0
        };
        let m = resolve(&[
            arg("sendBuf", sendBuf, bytes(send_elems, dt)?),
            arg("recvBuf", recvBuf, bytes(recvCount, dt)?),
        ])?;
        c.comm.scatter_raw(&m[0], &m[1], recvCount, dt, root, &s)
    })
}

/// `HcclAllGather`: `recvBuf` holds rankSize × sendCount elements.
#[no_mangle]
pub extern "C" fn HcclAllGather(
    sendBuf: *mut c_void,
    recvBuf: *mut c_void,
    sendCount: u64,
    dataType: HcclDataType,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    hccl("HcclAllGather", || {
        let dt = dtype(dataType)?;
        let (c, s) = target(comm, stream)?;
        let total = all_ranks(sendCount, "sendCount", c.comm.size())?;
        let m = resolve(&[
            arg("sendBuf", sendBuf, bytes(sendCount, dt)?),
            arg("recvBuf", recvBuf, bytes(total, dt)?),
        ])?;
        c.comm.all_gather_raw(&m[0], &m[1], sendCount, dt, &s)
    })
}

/// `HcclAllGatherV`.
#[no_mangle]
pub extern "C" fn HcclAllGatherV(
    sendBuf: *mut c_void,
    sendCount: u64,
    recvBuf: *mut c_void,
    recvCounts: *const c_void,
    recvDispls: *const c_void,
    dataType: HcclDataType,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    hccl("HcclAllGatherV", || {
        let dt = dtype(dataType)?;
        let (c, s) = target(comm, stream)?;
        let (counts, displs, span) = layout(
            recvCounts,
            recvDispls,
            ("recvCounts", "recvDispls"),
            c.comm.size(),
        )?;
        let m = resolve(&[
            arg("sendBuf", sendBuf, bytes(sendCount, dt)?),
            arg("recvBuf", recvBuf, bytes(span, dt)?),
        ])?;
        c.comm
            .all_gather_v_raw(&m[0], sendCount, &m[1], &counts, &displs, dt, &s)
    })
}

/// `HcclReduce`: only the root's `recvBuf` is written.
#[no_mangle]
pub extern "C" fn HcclReduce(
    sendBuf: *mut c_void,
    recvBuf: *mut c_void,
    count: u64,
    dataType: HcclDataType,
    op: HcclReduceOp,
    root: u32,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    hccl("HcclReduce", || {
        let (dt, rop) = (dtype(dataType)?, reduce_op(op)?);
        let (c, s) = target(comm, stream)?;
        let n = bytes(count, dt)?;
        let recv_len = if c.comm.rank() == root { n } else { 0 };
        let m = resolve(&[
            arg("sendBuf", sendBuf, n),
            arg("recvBuf", recvBuf, recv_len),
        ])?;
        c.comm.reduce_raw(&m[0], &m[1], count, dt, rop, root, &s)
    })
}

/// `HcclAlltoAll`: sendCount elements to and from every rank.
#[no_mangle]
pub extern "C" fn HcclAlltoAll(
    sendBuf: *const c_void,
    sendCount: u64,
    sendType: HcclDataType,
    recvBuf: *const c_void,
    recvCount: u64,
    recvType: HcclDataType,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    hccl("HcclAlltoAll", || {
        let (st, rt) = (dtype(sendType)?, dtype(recvType)?);
        let (c, s) = target(comm, stream)?;
        let p = c.comm.size();
        let m = resolve(&[
            arg(
                "sendBuf",
                sendBuf,
                bytes(all_ranks(sendCount, "sendCount", p)?, st)?,
            ),
            arg(
                "recvBuf",
                recvBuf,
                bytes(all_ranks(recvCount, "recvCount", p)?, rt)?,
            ),
        ])?;
        c.comm
            .all_to_all_raw(&m[0], sendCount, st, &m[1], recvCount, rt, &s)
    })
}

/// `HcclAlltoAllV`.
#[no_mangle]
pub extern "C" fn HcclAlltoAllV(
    sendBuf: *const c_void,
    sendCounts: *const c_void,
    sdispls: *const c_void,
    sendType: HcclDataType,
    recvBuf: *const c_void,
    recvCounts: *const c_void,
    rdispls: *const c_void,
    recvType: HcclDataType,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    hccl("HcclAlltoAllV", || {
        let (st, rt) = (dtype(sendType)?, dtype(recvType)?);
        let (c, s) = target(comm, stream)?;
        let p = c.comm.size();
        let (sc, sd, sspan) = layout(sendCounts, sdispls, ("sendCounts", "sdispls"), p)?;
        let (rc, rd, rspan) = layout(recvCounts, rdispls, ("recvCounts", "rdispls"), p)?;
        let m = resolve(&[
            arg("sendBuf", sendBuf, bytes(sspan, st)?),
            arg("recvBuf", recvBuf, bytes(rspan, rt)?),
        ])?;
        c.comm
            .all_to_all_v_raw(&m[0], &sc, &sd, st, &m[1], &rc, &rd, rt, &s)
    })
}

/// `HcclAlltoAllVC`: `sendCountMatrix` is rankSize × rankSize `uint64_t`,
/// row i = what rank i sends to each rank, the same on every rank; the
/// blocks are packed in rank order in both buffers.
#[no_mangle]
pub extern "C" fn HcclAlltoAllVC(
    sendBuf: *const c_void,
    sendCountMatrix: *const c_void,
    sendType: HcclDataType,
    recvBuf: *const c_void,
    recvType: HcclDataType,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    hccl("HcclAlltoAllVC", || {
        let (st, rt) = (dtype(sendType)?, dtype(recvType)?);
        let (c, s) = target(comm, stream)?;
        non_null(sendCountMatrix, "sendCountMatrix")?;
        let (p, rank) = (c.comm.size(), c.comm.rank());
        let n = (p as usize)
            .checked_mul(p as usize)
            .ok_or_else(|| HcclError::para(format!("{p} × {p} overflows")))?;
        // SAFETY: non-null; HCCL's contract: rankSize × rankSize uint64_t.
        let matrix = unsafe { std::slice::from_raw_parts(sendCountMatrix.cast::<u64>(), n) };
        let l = hccl_adapter::all_to_all_vc_layout(matrix, p, rank)?;
        let m = resolve(&[
            arg("sendBuf", sendBuf, bytes(l.send_total, st)?),
            arg("recvBuf", recvBuf, bytes(l.recv_total, rt)?),
        ])?;
        c.comm.all_to_all_vc_raw(&m[0], matrix, st, &m[1], rt, &s)
    })
}

/// One point-to-point call: `send` (HcclSend) or receive (HcclRecv).
#[allow(clippy::too_many_arguments)]
fn p2p(
    send: bool,
    buf: *mut c_void,
    count: u64,
    dataType: HcclDataType,
    peer: u32,
    comm: HcclComm,
    stream: aclrtStream,
) -> Result<()> {
    let dt = dtype(dataType)?;
    let (c, s) = target(comm, stream)?;
    let what = if send { "sendBuf" } else { "recvBuf" };
    let m = resolve(&[arg(what, buf, bytes(count, dt)?)])?;
    if send {
        c.comm.send_raw(&m[0], count, dt, peer, &s)
    } else {
        c.comm.recv_raw(&m[0], count, dt, peer, &s)
    }
}

/// `HcclSend`.
#[no_mangle]
pub extern "C" fn HcclSend(
    sendBuf: *mut c_void,
    count: u64,
    dataType: HcclDataType,
    destRank: u32,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    hccl("HcclSend", || {
        p2p(true, sendBuf, count, dataType, destRank, comm, stream)
    })
}

/// `HcclRecv`.
#[no_mangle]
pub extern "C" fn HcclRecv(
    recvBuf: *mut c_void,
    count: u64,
    dataType: HcclDataType,
    srcRank: u32,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    hccl("HcclRecv", || {
        p2p(false, recvBuf, count, dataType, srcRank, comm, stream)
    })
}

/// `HcclBatchSendRecv`.
#[no_mangle]
pub extern "C" fn HcclBatchSendRecv(
    sendRecvInfo: *mut HcclSendRecvItem,
    itemNum: u32,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    hccl("HcclBatchSendRecv", || {
        let (c, s) = target(comm, stream)?;
        if itemNum == 0 {
            return Ok(());
        }
        non_null(sendRecvInfo, "sendRecvInfo")?;
        // SAFETY: non-null; the caller passes itemNum items (C contract).
        let raw = unsafe { std::slice::from_raw_parts(sendRecvInfo, itemNum as usize) };
        let mut items = Vec::with_capacity(raw.len());
        for (i, it) in raw.iter().enumerate() {
            let kind = match it.sendRecvType {
                HCCL_SEND => SendRecvKind::Send,
                HCCL_RECV => SendRecvKind::Recv,
                t => {
                    return Err(HcclError::para(format!(
                        "item {i}: unknown sendRecvType {t}"
                    )))
                }
            };
            let dt = dtype(it.dataType).map_err(|e| e.during(format!("item {i}")))?;
            let what = if kind == SendRecvKind::Send {
                "item send buf"
            } else {
                "item recv buf"
            };
            let buf = resolve(&[arg(what, it.buf, bytes(it.count, dt)?)])?.remove(0);
            items.push(SendRecvItem {
                kind,
                buf,
                count: it.count,
                dtype: dt,
                peer: it.remoteRank,
            });
        }
        c.comm.batch_send_recv(&items, &s)
    })
}

/// `HcclBarrier`.
#[no_mangle]
pub extern "C" fn HcclBarrier(comm: HcclComm, stream: aclrtStream) -> HcclResult {
    hccl("HcclBarrier", || {
        let (c, s) = target(comm, stream)?;
        c.comm.barrier(&s)
    })
}
