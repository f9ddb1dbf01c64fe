//! Batched point-to-point transfers (HCCL's `HcclBatchSendRecv`).
//!
//! Items are grouped into rounds by ring distance: in round `d` this rank
//! sends to `rank + d` and receives from `rank - d`, and the peers it meets
//! are in the same round, so every transfer's partner is posted no later
//! than itself. Within a round the sends run on the caller's stream and the
//! receives on a side stream of the same device, so a ring shift (everyone
//! sends right, receives left) cannot deadlock. When both directions of a
//! round go to one peer (`2d = p`), the lower rank sends first and the
//! higher receives first, on one stream, so the two ops meet in order.

use super::{Call, HcclComm, NULL};
use crate::validate;
use hccl_algorithm::OpType;
use hccl_platform::{DataType, DeviceMem, HcclError, Notify, Result, Stream};

/// Direction of one batch item (HCCL's `HcclSendRecvType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendRecvKind {
    /// Send `count` elements of the buffer to the peer.
    Send,
    /// Receive `count` elements from the peer into the buffer.
    Recv,
}

/// One transfer of [`HcclComm::batch_send_recv`] (HCCL's `HcclSendRecvItem`).
#[derive(Clone, Debug)]
pub struct SendRecvItem {
    /// Send or receive.
    pub kind: SendRecvKind,
    /// The data (sent from, or received into).
    pub buf: DeviceMem,
    /// Elements to move.
    pub count: u64,
    /// Element type.
    pub dtype: DataType,
    /// The other rank.
    pub peer: u32,
}

/// The side stream and the fork/join notifies of batched transfers.
#[derive(Debug)]
pub(super) struct BatchStreams {
    side: Stream,
    fork: Notify,
    join: Notify,
}

impl HcclComm {
    /// HCCL's `HcclBatchSendRecv`: every item is a send to or a receive from
    /// a peer; the batch completes on `stream` when all have. Items to the
    /// same peer in the same direction keep their order, which must match
    /// the peer's. Every item is checked before anything is enqueued.
    pub fn batch_send_recv(&self, items: &[SendRecvItem], stream: &Stream) -> Result<()> {
        let (p, me) = (self.size(), self.rank());
        let ctx = |i: usize, e: HcclError| {
            e.rank(me)
                .during(format!("HcclBatchSendRecv item {i} of {}", items.len()))
        };
        for (i, it) in items.iter().enumerate() {
            if it.peer >= p {
                return Err(ctx(
                    i,
                    HcclError::para(format!(
                        "remote rank {} is out of range for {p} ranks",
                        it.peer
                    )),
                ));
            }
            if it.peer == me {
                return Err(ctx(
                    i,
                    HcclError::para("a rank cannot send to or receive from itself"),
                ));
            }
            let bytes = validate::bytes_of(it.count, it.dtype).map_err(|e| ctx(i, e))?;
            if bytes > 0 {
                validate::buffer("buf", &it.buf, bytes, it.count, it.dtype)
                    .map_err(|e| ctx(i, e))?;
            }
        }
        let g = self.g();
        if stream.device().uid() != g.comm.device().uid() {
            return Err(ctx(
                0,
                HcclError::para("the stream belongs to another device than this communicator's"),
            ));
        }
        let bs = g.batch.get_or_init(|| BatchStreams {
            side: g.comm.create_stream(),
            fork: Notify::new(g.comm.device()),
            join: Notify::new(g.comm.device()),
        });
        let marks = [(stream, stream.mark()), (&bs.side, bs.side.mark())];
        // on a capturing stream the side stream's part is recorded too, as
        // a lane of the same graph (platform `stream/graph.rs`)
        let capturing = stream.is_capturing();
        let run = || -> Result<()> {
            if capturing {
                bs.side.join_capture(stream)?;
            }
            for d in 1..p {
                let to = (me + d) % p;
                let from = (me + p - d) % p;
                let sends = items
                    .iter()
                    .filter(move |it| it.kind == SendRecvKind::Send && it.peer == to);
                let recvs = items
                    .iter()
                    .filter(move |it| it.kind == SendRecvKind::Recv && it.peer == from);
                if to == from {
                    // one peer both ways: the lower rank sends first
                    let ordered: Vec<&SendRecvItem> = if me < to {
                        sends.chain(recvs).collect()
                    } else {
                        recvs.chain(sends).collect()
                    };
                    for it in ordered {
                        self.submit_item(it, stream)?;
                    }
                    continue;
                }
                let recvs: Vec<&SendRecvItem> = recvs.collect();
                if !recvs.is_empty() {
                    stream.notify_record(&bs.fork)?;
                    bs.side.notify_wait(&bs.fork)?;
                    for it in &recvs {
                        self.submit_item(it, &bs.side)?;
                    }
                }
                for it in sends {
                    self.submit_item(it, stream)?;
                }
                if !recvs.is_empty() {
                    bs.side.notify_record(&bs.join)?;
                    stream.notify_wait(&bs.join)?;
                }
            }
            Ok(())
        };
        let r = run();
        if capturing {
            bs.side.leave_capture();
        }
        r.map_err(|e| {
            let e = e.rank(me).during("HcclBatchSendRecv");
            for (s, m) in marks {
                s.rollback(m, &e);
            }
            e
        })
    }

    fn submit_item(&self, it: &SendRecvItem, stream: &Stream) -> Result<()> {
        let mut call = match it.kind {
            SendRecvKind::Send => Call::new(
                "HcclSend",
                OpType::Send,
                &it.buf,
                it.count,
                &NULL,
                0,
                it.count,
                it.dtype,
            ),
            SendRecvKind::Recv => Call::new(
                "HcclRecv",
                OpType::Receive,
                &NULL,
                0,
                &it.buf,
                it.count,
                it.count,
                it.dtype,
            ),
        };
        call.peer = it.peer;
        self.submit(call, stream)
    }
}
