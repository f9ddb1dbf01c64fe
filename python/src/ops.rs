//! The ops' arguments, from Python objects to an [`Op`] checked before
//! anything is enqueued, and [`run`], which enqueues it and waits (or
//! hands back a [`Work`]).
//!
//! What the shim checks itself: buffers resolve (buffer protocol or
//! torch tensor), are contiguous, writable where written, of one element
//! type, and of sizes that divide into the op's blocks; the operator is
//! known. Everything else (roots, peers, lengths against counts, overlap)
//! the Rust API checks, also before enqueuing.

use crate::buffer::{self, Buf};
use crate::dtype::{self, Elem};
use crate::errors;
use crate::lane::{self, Waited, SLICE};
use crate::shared::{LaneId, Shared};
use crate::work::Work;
use hccl_adapter::{DeviceMem, ReduceOp, Result, SendRecvItem, SendRecvKind, Stream};
use pyo3::prelude::*;
use std::sync::{Arc, LazyLock};
use std::time::Instant;

/// What an op does, with its scalar arguments.
enum Kind {
    AllReduce(ReduceOp),
    AllGather,
    AllGatherV(Vec<u64>, Vec<u64>),
    ReduceScatter(ReduceOp),
    ReduceScatterV(Vec<u64>, Vec<u64>, ReduceOp),
    Broadcast(u32),
    Reduce(ReduceOp, u32),
    Scatter(u32),
    Gather(u32),
    AllToAll(u64),
    AllToAllV([Vec<u64>; 4]),
    Send(u32),
    Recv(u32),
    Batch(Vec<(SendRecvKind, u32)>),
    Barrier,
}

/// One op call, checked, with the buffers it holds.
pub(crate) struct Op {
    kind: Kind,
    send: Option<Buf>,
    recv: Option<Buf>,
    /// The op writes its result over `send` (`recv` was not given).
    in_place: bool,
    /// The items' buffers of a batch.
    items: Vec<Buf>,
    elem: Elem,
}

/// The handle of an empty buffer.
static NULL: LazyLock<DeviceMem> = LazyLock::new(DeviceMem::null);

fn para(obj: &Bound<'_, PyAny>, msg: String) -> PyErr {
    errors::para(obj.py(), msg)
}

/// The operator `op` names (None: sum).
fn reduce_op(py: Python<'_>, op: Option<&Bound<'_, PyAny>>) -> PyResult<ReduceOp> {
    let Some(op) = op else {
        return Ok(ReduceOp::Sum);
    };
    if let Ok(name) = op.extract::<&str>() {
        return dtype::reduce_op(name).ok_or_else(|| {
            errors::para(
                py,
                format!("unknown reduction '{name}': expected 'sum', 'prod', 'max' or 'min'"),
            )
        });
    }
    if let Ok(code) = op.extract::<u32>() {
        return ReduceOp::ALL
            .into_iter()
            .find(|o| o.code() == code)
            .ok_or_else(|| errors::para(py, format!("unknown reduction code {code}")));
    }
    Err(errors::para(
        py,
        format!(
            "the reduction must be a name ('sum', ...), got {}",
            op.repr()?
        ),
    ))
}

/// The element type both buffers share.
fn same_type(send: &Buf, recv: &Buf, any: &Bound<'_, PyAny>) -> PyResult<Elem> {
    if send.elem != recv.elem {
        return Err(para(
            any,
            format!(
                "mixed element types: sendbuf is {}, recvbuf is {}",
                send.elem.name(),
                recv.elem.name()
            ),
        ));
    }
    Ok(send.elem)
}

/// Displacements packed in rank order for `counts`.
fn packed(counts: &[u64]) -> Vec<u64> {
    let mut at = 0u64;
    counts
        .iter()
        .map(|c| {
            let d = at;
            at = at.saturating_add(*c);
            d
        })
        .collect()
}

impl Op {
    fn new(kind: Kind, send: Option<Buf>, recv: Option<Buf>, elem: Elem) -> Op {
        Op {
            kind,
            send,
            recv,
            in_place: false,
            items: Vec::new(),
            elem,
        }
    }

    /// A two-buffer op; `recv` None means in place.
    fn reducing(
        send: &Bound<'_, PyAny>,
        recv: Option<&Bound<'_, PyAny>>,
        op: Option<&Bound<'_, PyAny>>,
        kind: impl FnOnce(ReduceOp) -> Kind,
        recv_needed: bool,
    ) -> PyResult<Op> {
        let py = send.py();
        let op = reduce_op(py, op)?;
        match recv {
            Some(r) if !r.is(send) => {
                let s = buffer::get(send, "sendbuf", false)?;
                let rb = buffer::get(r, "recvbuf", recv_needed)?;
                let elem = same_type(&s, &rb, send)?;
                Ok(Op::new(kind(elem.reduce_op(op)), Some(s), Some(rb), elem))
            }
            _ => {
                let s = buffer::get(send, "sendbuf", recv_needed)?;
                let elem = s.elem;
                let mut o = Op::new(kind(elem.reduce_op(op)), Some(s), None, elem);
                o.in_place = true;
                Ok(o)
            }
        }
    }

    /// A two-buffer op that is never in place.
    fn pair(send: &Bound<'_, PyAny>, recv: &Bound<'_, PyAny>, kind: Kind) -> PyResult<Op> {
        let s = buffer::get(send, "sendbuf", false)?;
        let r = buffer::get(recv, "recvbuf", true)?;
        let elem = same_type(&s, &r, send)?;
        Ok(Op::new(kind, Some(s), Some(r), elem))
    }

    pub fn all_reduce(
        send: &Bound<'_, PyAny>,
        recv: Option<&Bound<'_, PyAny>>,
        op: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Op> {
        Op::reducing(send, recv, op, Kind::AllReduce, true)
    }

    pub fn all_gather(send: &Bound<'_, PyAny>, recv: &Bound<'_, PyAny>) -> PyResult<Op> {
        Op::pair(send, recv, Kind::AllGather)
    }

    pub fn all_gather_v(
        send: &Bound<'_, PyAny>,
        recv: &Bound<'_, PyAny>,
        counts: Vec<u64>,
        displs: Option<Vec<u64>>,
    ) -> PyResult<Op> {
        let displs = displs.unwrap_or_else(|| packed(&counts));
        Op::pair(send, recv, Kind::AllGatherV(counts, displs))
    }

    pub fn reduce_scatter(
        send: &Bound<'_, PyAny>,
        recv: &Bound<'_, PyAny>,
        op: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Op> {
        let op = reduce_op(send.py(), op)?;
        let mut o = Op::pair(send, recv, Kind::Barrier)?;
        o.kind = Kind::ReduceScatter(o.elem.reduce_op(op));
        Ok(o)
    }

    pub fn reduce_scatter_v(
        send: &Bound<'_, PyAny>,
        recv: &Bound<'_, PyAny>,
        counts: Vec<u64>,
        displs: Option<Vec<u64>>,
        op: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Op> {
        let op = reduce_op(send.py(), op)?;
        let displs = displs.unwrap_or_else(|| packed(&counts));
        let mut o = Op::pair(send, recv, Kind::Barrier)?;
        o.kind = Kind::ReduceScatterV(counts, displs, o.elem.reduce_op(op));
        Ok(o)
    }

    pub fn broadcast(buf: &Bound<'_, PyAny>, root: u32) -> PyResult<Op> {
        let b = buffer::get(buf, "buf", true)?;
        let elem = b.elem;
        Ok(Op::new(Kind::Broadcast(root), Some(b), None, elem))
    }

    pub fn reduce(
        send: &Bound<'_, PyAny>,
        recv: Option<&Bound<'_, PyAny>>,
        op: Option<&Bound<'_, PyAny>>,
        root: u32,
        me: u32,
    ) -> PyResult<Op> {
        Op::reducing(send, recv, op, |op| Kind::Reduce(op, root), me == root)
    }

    pub fn scatter(
        send: Option<&Bound<'_, PyAny>>,
        recv: &Bound<'_, PyAny>,
        root: u32,
        me: u32,
    ) -> PyResult<Op> {
        match send {
            Some(s) if me == root => Op::pair(s, recv, Kind::Scatter(root)),
            _ => {
                if me == root {
                    return Err(para(recv, "sendbuf is required on the root".into()));
                }
                let r = buffer::get(recv, "recvbuf", true)?;
                let elem = r.elem;
                Ok(Op::new(Kind::Scatter(root), None, Some(r), elem))
            }
        }
    }

    pub fn gather(
        send: &Bound<'_, PyAny>,
        recv: Option<&Bound<'_, PyAny>>,
        root: u32,
        me: u32,
    ) -> PyResult<Op> {
        match recv {
            Some(r) if me == root => Op::pair(send, r, Kind::Gather(root)),
            _ => {
                if me == root {
                    return Err(para(send, "recvbuf is required on the root".into()));
                }
                let s = buffer::get(send, "sendbuf", false)?;
                let elem = s.elem;
                Ok(Op::new(Kind::Gather(root), Some(s), None, elem))
            }
        }
    }

    pub fn all_to_all(send: &Bound<'_, PyAny>, recv: &Bound<'_, PyAny>, p: u32) -> PyResult<Op> {
        let mut o = Op::pair(send, recv, Kind::Barrier)?;
        let n = o.send.as_ref().map_or(0, Buf::count);
        if n % u64::from(p) != 0 {
            return Err(para(
                send,
                format!("sendbuf holds {n} elements, not {p} equal blocks"),
            ));
        }
        o.kind = Kind::AllToAll(n / u64::from(p));
        Ok(o)
    }

    pub fn all_to_all_v(
        send: &Bound<'_, PyAny>,
        recv: &Bound<'_, PyAny>,
        send_counts: Vec<u64>,
        recv_counts: Vec<u64>,
        send_displs: Option<Vec<u64>>,
        recv_displs: Option<Vec<u64>>,
    ) -> PyResult<Op> {
        let sd = send_displs.unwrap_or_else(|| packed(&send_counts));
        let rd = recv_displs.unwrap_or_else(|| packed(&recv_counts));
        Op::pair(
            send,
            recv,
            Kind::AllToAllV([send_counts, sd, recv_counts, rd]),
        )
    }

    pub fn send(buf: &Bound<'_, PyAny>, dest: u32) -> PyResult<Op> {
        let b = buffer::get(buf, "buf", false)?;
        let elem = b.elem;
        Ok(Op::new(Kind::Send(dest), Some(b), None, elem))
    }

    pub fn recv(buf: &Bound<'_, PyAny>, source: u32) -> PyResult<Op> {
        let b = buffer::get(buf, "buf", true)?;
        let elem = b.elem;
        Ok(Op::new(Kind::Recv(source), None, Some(b), elem))
    }

    pub fn batch_send_recv(items: &Bound<'_, PyAny>) -> PyResult<Op> {
        let mut kinds = Vec::new();
        let mut bufs = Vec::new();
        for (i, item) in items.try_iter()?.enumerate() {
            let item = item?;
            let (kind, buf, peer): (String, Bound<'_, PyAny>, u32) =
                item.extract().map_err(|_| {
                    para(
                        items,
                        format!("item {i}: expected a (\"send\" | \"recv\", buffer, peer) tuple"),
                    )
                })?;
            let (k, writable) = match kind.to_ascii_lowercase().as_str() {
                "send" | "isend" => (SendRecvKind::Send, false),
                "recv" | "irecv" => (SendRecvKind::Recv, true),
                _ => {
                    return Err(para(
                        items,
                        format!("item {i}: kind '{kind}' is neither 'send' nor 'recv'"),
                    ))
                }
            };
            bufs.push(buffer::get(&buf, &format!("item {i}"), writable)?);
            kinds.push((k, peer));
        }
        let elem = bufs
            .first()
            .map_or(dtype::from_name("uint8").expect("known"), |b| b.elem);
        let mut o = Op::new(Kind::Batch(kinds), None, None, elem);
        o.items = bufs;
        Ok(o)
    }

    pub fn barrier() -> Op {
        Op::new(
            Kind::Barrier,
            None,
            None,
            dtype::from_name("float32").expect("known"),
        )
    }

    fn lane(&self) -> LaneId {
        match self.kind {
            Kind::Recv(_) => LaneId::Recv,
            _ => LaneId::Main,
        }
    }
}

/// Enqueues `op` on its lane; blocking (`asynch` false) waits for it and
/// raises its error, async returns its [`Work`].
pub(crate) fn run(
    py: Python<'_>,
    sh: &Arc<Shared>,
    op: Op,
    asynch: bool,
) -> PyResult<Option<Work>> {
    sh.pin_driver();
    // the memory of abandoned ops that have ended since
    sh.reap();
    let (send, recv) = match (&op.send, &op.recv) {
        (Some(s), Some(r)) => sh.cache.pair(s, r),
        (Some(s), None) => {
            let m = sh.cache.mem(s);
            let r = if op.in_place { m.clone() } else { NULL.clone() };
            (m, r)
        }
        (None, Some(r)) => (NULL.clone(), sh.cache.mem(r)),
        (None, None) => (NULL.clone(), NULL.clone()),
    };
    let items: Vec<SendRecvItem> = match &op.kind {
        Kind::Batch(kinds) => kinds
            .iter()
            .zip(&op.items)
            .map(|(&(kind, peer), b)| SendRecvItem {
                kind,
                buf: sh.cache.mem(b),
                count: b.count(),
                dtype: b.elem.dtype,
                peer,
            })
            .collect(),
        _ => Vec::new(),
    };
    let dt = op.elem.dtype;
    let count = |b: &Option<Buf>| b.as_ref().map_or(0, Buf::count);
    let (n_send, n_recv) = (count(&op.send), count(&op.recv));
    let comm = &sh.comm;
    let kind = &op.kind;
    let enqueue = |st: &Stream| -> Result<()> {
        match kind {
            Kind::AllReduce(o) => comm.all_reduce_raw(&send, &recv, n_send, dt, *o, st),
            Kind::AllGather => comm.all_gather_raw(&send, &recv, n_send, dt, st),
            Kind::AllGatherV(c, d) => comm.all_gather_v_raw(&send, n_send, &recv, c, d, dt, st),
            Kind::ReduceScatter(o) => comm.reduce_scatter_raw(&send, &recv, n_recv, dt, *o, st),
            Kind::ReduceScatterV(c, d, o) => {
                comm.reduce_scatter_v_raw(&send, c, d, &recv, n_recv, dt, *o, st)
            }
            Kind::Broadcast(root) => comm.broadcast_raw(&send, n_send, dt, *root, st),
            Kind::Reduce(o, root) => comm.reduce_raw(&send, &recv, n_send, dt, *o, *root, st),
            Kind::Scatter(root) => comm.scatter_raw(&send, &recv, n_recv, dt, *root, st),
            Kind::Gather(root) => comm.gather_raw(&send, &recv, n_send, dt, *root, st),
            Kind::AllToAll(n) => comm.all_to_all_raw(&send, *n, dt, &recv, *n, dt, st),
            Kind::AllToAllV([sc, sd, rc, rd]) => {
                comm.all_to_all_v_raw(&send, sc, sd, dt, &recv, rc, rd, dt, st)
            }
            Kind::Send(peer) => comm.send_raw(&send, n_send, dt, *peer, st),
            Kind::Recv(peer) => comm.recv_raw(&recv, n_recv, dt, *peer, st),
            Kind::Batch(_) => comm.batch_send_recv(&items, st),
            Kind::Barrier => comm.barrier(st),
        }
    };
    let lane_id = op.lane();
    let l = sh.lane(lane_id);
    if asynch {
        let seq = py
            .detach(|| l.submit(enqueue))
            .map_err(|e| errors::to_py(py, e))?;
        return Ok(Some(Work::new(sh.clone(), lane_id, seq, op.hold())));
    }
    // enqueue and the first slice of the wait in one release of the GIL
    let (seq, first) = py
        .detach(|| {
            let seq = l.submit(enqueue)?;
            Ok((seq, l.poll(seq, Some(Instant::now() + SLICE))))
        })
        .map_err(|e| errors::to_py(py, e))?;
    match lane::wait(py, l, &sh.comm, seq, None, Some(first)) {
        Ok(Waited::Done(r)) => {
            drop(op);
            lane::raise(py, r).map(|_| None)
        }
        // (a wait without a timeout does not time out)
        Ok(Waited::TimedOut) => Err(errors::to_py(
            py,
            hccl_adapter::HcclError::internal("a wait without a timeout timed out"),
        )),
        Err(i) => {
            if i.stranded {
                // an op may still write there: keep it alive for good
                std::mem::forget(op.hold());
            }
            Err(i.err)
        }
    }
}

impl Op {
    /// The buffers, to keep until the op completed.
    fn hold(self) -> Vec<Buf> {
        let mut v = self.items;
        v.extend(self.send);
        v.extend(self.recv);
        v
    }
}
