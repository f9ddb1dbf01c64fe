//! Step primitives: one call per communication step, the vocabulary every
//! template is written in (in the spirit of NCCL's `send` / `recv` /
//! `recvReduceSend` prims and UCC's ring steps).
//!
//! A step moves data between this rank and one or more peers with HCCL's
//! link verbs under one handshake, **the receiver acks first**: a rank
//! only writes into a peer's buffer once that peer has said (`TxAck`) that
//! it is done with the landing area. Every primitive below is the one
//! engine, [`exchange`], which enqueues, in this order:
//!
//! 1. `TxAck` on every link it receives over ("my landing area is free");
//! 2. per send: `RxAck` (wait for the peer's ack), then one `TxAsync` per
//!    piece (a single piece as one `tx_after_ack` verb, which a link that
//!    can hold early data may send before the ack arrives);
//! 3. `RxAsync` for every receive that names its landing area;
//! 4. `RxWaitDone` per transfer expected on every receive link;
//! 5. `TxWaitDone` per send.
//!
//! Every ack goes out before any wait, so ranks that receive from some
//! peers and send to others in the same step (a chain, a ring, a mesh)
//! cannot deadlock. Local work that belongs to a step (the reduction of
//! what arrived) is enqueued after its verbs, on the same stream.
//!
//! A step is described by its halves: [`Tx`] (what goes where, named
//! after `TxAsync`) and [`Rx`] (what arrives over which link). Transfers
//! are writes into the receiver's buffer, so where NCCL's ring calls
//! `recvReduceSend` (receive, reduce, forward the result), a step here
//! sends the slice reduced in the previous step while the next one
//! arrives: [`send_recv_reduce`]. A ring reduce-scatter step reads as
//!
//! ```ignore
//! prim::send_recv_reduce(
//!     stream,
//!     Tx::new(right, &tx.of(input)?, kind, base + tx.offset),
//!     Rx::at(left, &landing, kind, base + rx.offset),
//!     (&rx.of(input)?, &landing),
//!     (dtype, op),
//! )
//! ```

use hccl_platform::{DataType, DeviceMem, LinkHandle, MemKind, ReduceOp, Result, Stream};

/// One piece of a multi-piece send: `src` (local) into the peer's `kind`
/// buffer at `offset`.
pub type Piece = (DeviceMem, MemKind, usize);

/// What a send carries.
#[derive(Clone, Copy, Debug)]
enum Data<'a> {
    /// One contiguous source: (src, peer buffer, offset in it).
    One(&'a DeviceMem, MemKind, usize),
    /// Several pieces under one handshake.
    Pieces(&'a [Piece]),
}

/// The sending half of a step: data through `link` into the peer's buffer.
#[derive(Clone, Copy, Debug)]
pub struct Tx<'a> {
    link: &'a LinkHandle,
    data: Data<'a>,
}

impl<'a> Tx<'a> {
    /// `src` (local) through `link` into the peer's `kind` buffer at `offset`.
    pub fn new(link: &'a LinkHandle, src: &'a DeviceMem, kind: MemKind, offset: usize) -> Self {
        Tx {
            link,
            data: Data::One(src, kind, offset),
        }
    }

    /// Data that is not contiguous: every piece through `link` under one
    /// ack, so the pieces cost one handshake and count as one step. The
    /// receiver expects as many transfers ([`Rx::transfers`]).
    pub fn pieces(link: &'a LinkHandle, pieces: &'a [Piece]) -> Self {
        Tx {
            link,
            data: Data::Pieces(pieces),
        }
    }

    fn tx(&self, s: &Stream) -> Result<()> {
        match self.data {
            Data::One(src, kind, off) => self.link.tx_async(kind, off, src, s),
            Data::Pieces(pieces) => {
                for (src, kind, off) in pieces {
                    self.link.tx_async(*kind, *off, src, s)?;
                }
                Ok(())
            }
        }
    }
}

/// The receiving half of a step: transfers arriving over `link` (the
/// sender writes them straight into this rank's buffer).
#[derive(Clone, Copy, Debug)]
pub struct Rx<'a> {
    link: &'a LinkHandle,
    /// Where the transfer lands, announced with `RxAsync` (as HCCL's ring
    /// steps do): (local landing, its buffer as the peer addresses it, offset).
    landing: Option<(&'a DeviceMem, MemKind, usize)>,
    transfers: usize,
}

impl<'a> Rx<'a> {
    /// One transfer over `link`.
    pub fn new(link: &'a LinkHandle) -> Self {
        Rx {
            link,
            landing: None,
            transfers: 1,
        }
    }

    /// One transfer over `link` that lands in `landing` (which the peer
    /// addresses as its `kind` buffer at `offset`); the step announces it
    /// with `RxAsync`.
    pub fn at(link: &'a LinkHandle, landing: &'a DeviceMem, kind: MemKind, offset: usize) -> Self {
        Rx {
            landing: Some((landing, kind, offset)),
            ..Self::new(link)
        }
    }

    /// `n` transfers over `link` under one ack (the pieces of a
    /// [`Tx::pieces`]).
    pub fn transfers(link: &'a LinkHandle, n: usize) -> Self {
        Rx {
            transfers: n,
            ..Self::new(link)
        }
    }
}

/// Enqueues one step with any number of peers: receive over every link of
/// `from` and make every send of `to`, in the order the module docs give.
pub fn exchange(s: &Stream, from: &[Rx<'_>], to: &[Tx<'_>]) -> Result<()> {
    for r in from {
        r.link.tx_ack(s)?;
    }
    for t in to {
        match t.data {
            // one verb where the link may send small data before the ack
            // arrives (TCP: the receiver holds it until it has acked)
            Data::One(src, kind, off) => t.link.tx_after_ack(kind, off, src, s)?,
            Data::Pieces(_) => {
                t.link.rx_ack(s)?;
                t.tx(s)?;
            }
        }
    }
    for r in from {
        match r.landing {
            // a landing in this rank's own user buffer (graph mode): the
            // sender writes it through its mapping; an RxAsync naming a
            // user buffer is a *read* of the peer's (`read_peer`), which
            // would race the peer's own progress
            Some((_, MemKind::ParamInput | MemKind::ParamOutput, _)) | None => {}
            Some((landing, kind, off)) => r.link.rx_async(kind, off, landing, s)?,
        }
    }
    for r in from {
        for _ in 0..r.transfers {
            r.link.rx_wait_done(s)?;
        }
    }
    for t in to {
        t.link.tx_wait_done(s)?;
    }
    Ok(())
}

/// Enqueues one step with at most one receive and one send (either may be
/// absent: a rank at the end of a chain, a rank idle in a tree step).
pub fn step(s: &Stream, from: Option<Rx<'_>>, to: Option<Tx<'_>>) -> Result<()> {
    exchange(s, from.as_slice(), to.as_slice())
}

/// Enqueues a step that only sends.
pub fn send(s: &Stream, to: Tx<'_>) -> Result<()> {
    exchange(s, &[], &[to])
}

/// Enqueues a step that only receives.
pub fn recv(s: &Stream, from: Rx<'_>) -> Result<()> {
    exchange(s, &[from], &[])
}

/// Enqueues a step that sends `to` and receives `from` (a ring or
/// allgather step; `to` and `from` may be the same peer).
pub fn send_recv(s: &Stream, to: Tx<'_>, from: Rx<'_>) -> Result<()> {
    exchange(s, &[from], &[to])
}

/// Enqueues a step that receives `from` and then reduces what arrived
/// (`src`, the landing area) into `dst`.
pub fn recv_reduce(
    s: &Stream,
    from: Rx<'_>,
    (dst, src): (&DeviceMem, &DeviceMem),
    how: (DataType, ReduceOp),
) -> Result<()> {
    recv(s, from)?;
    reduce(s, dst, src, how)
}

/// Enqueues a step that sends `to`, receives `from`, and then reduces
/// what arrived (`src`, the landing area) into `dst`: a ring
/// reduce-scatter step, a recursive-halving step.
pub fn send_recv_reduce(
    s: &Stream,
    to: Tx<'_>,
    from: Rx<'_>,
    (dst, src): (&DeviceMem, &DeviceMem),
    how: (DataType, ReduceOp),
) -> Result<()> {
    send_recv(s, to, from)?;
    reduce(s, dst, src, how)
}

/// Enqueues `dst op= src`, unless there is nothing to reduce (an empty
/// slice enqueues no task).
pub fn reduce(
    s: &Stream,
    dst: &DeviceMem,
    src: &DeviceMem,
    (dtype, op): (DataType, ReduceOp),
) -> Result<()> {
    if dst.is_empty() {
        return Ok(());
    }
    s.reduce_async(dst, src, dtype, op)
}
