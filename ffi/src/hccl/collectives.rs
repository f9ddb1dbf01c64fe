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
fn target(comm: HcclComm, stream: aclrtStream) -> Result<(Arc<CommEntry>, Stream)> {
    let c = lookup(comm)?;
    let s = stream_for_op(stream, c.comm.device())?;
    Ok((c, s))
}

fn arg(what: &'static str, ptr: *const c_void, len: usize) -> Arg {
    Arg { what, ptr, len }
}

/// A rank-sized array of uint64_t counts or displacements.
fn u64s(p: *const c_void, what: &str, n: u32) -> Result<Vec<u64>> {
    non_null(p, what)?;
    // SAFETY: non-null; HCCL's contract: an array of rankSize uint64_t.
    Ok(unsafe { std::slice::from_raw_parts(p.cast::<u64>(), n as usize) }.to_vec())
}

/// Elements spanned by counts at displacements: max(count + displ).
fn extent(counts: &[u64], displs: &[u64], what: &str) -> Result<u64> {
    counts.iter().zip(displs).try_fold(0u64, |m, (c, d)| {
        c.checked_add(*d).map(|e| m.max(e)).ok_or_else(|| {
            HcclError::para(format!("{what}: count {c} + displacement {d} overflows"))
        })
    })
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
        let total = recvCount.checked_mul(c.comm.size() as u64).ok_or_else(|| {
            HcclError::para(format!("recvCount {recvCount} × rank size overflows"))
        })?;
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
        let p = c.comm.size();
        let (counts, displs) = (
            u64s(sendCounts, "sendCounts", p)?,
            u64s(sendDispls, "sendDispls", p)?,
        );
        let span = extent(&counts, &displs, "sendCounts/sendDispls")?;
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
            recvCount.checked_mul(c.comm.size() as u64).ok_or_else(|| {
                HcclError::para(format!("recvCount {recvCount} × rank size overflows"))
            })?
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
        let total = sendCount.checked_mul(c.comm.size() as u64).ok_or_else(|| {
            HcclError::para(format!("sendCount {sendCount} × rank size overflows"))
        })?;
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
        let p = c.comm.size();
        let (counts, displs) = (
            u64s(recvCounts, "recvCounts", p)?,
            u64s(recvDispls, "recvDispls", p)?,
        );
        let span = extent(&counts, &displs, "recvCounts/recvDispls")?;
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
        let p = c.comm.size() as u64;
        let total = |n: u64, what: &str| {
            n.checked_mul(p)
                .ok_or_else(|| HcclError::para(format!("{what} {n} × rank size overflows")))
        };
        let m = resolve(&[
            arg(
                "sendBuf",
                sendBuf,
                bytes(total(sendCount, "sendCount")?, st)?,
            ),
            arg(
                "recvBuf",
                recvBuf,
                bytes(total(recvCount, "recvCount")?, rt)?,
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
        let (sc, sd) = (
            u64s(sendCounts, "sendCounts", p)?,
            u64s(sdispls, "sdispls", p)?,
        );
        let (rc, rd) = (
            u64s(recvCounts, "recvCounts", p)?,
            u64s(rdispls, "rdispls", p)?,
        );
        let m = resolve(&[
            arg(
                "sendBuf",
                sendBuf,
                bytes(extent(&sc, &sd, "sendCounts/sdispls")?, st)?,
            ),
            arg(
                "recvBuf",
                recvBuf,
                bytes(extent(&rc, &rd, "recvCounts/rdispls")?, rt)?,
            ),
        ])?;
        c.comm
            .all_to_all_v_raw(&m[0], &sc, &sd, st, &m[1], &rc, &rd, rt, &s)
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
