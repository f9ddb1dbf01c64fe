//! One communication step on the link verbs: receive from one peer, send to
//! another (or the same) peer, with the handshake that makes a write into
//! the peer's buffer safe. Every point-to-point executor step is this.

use hccl_platform::{DeviceMem, LinkHandle, MemKind, Result, Stream};

/// What a step sends: `src` (local) through `link` into the peer's `kind`
/// buffer at `offset`.
pub(crate) type Send<'a> = (&'a LinkHandle, &'a DeviceMem, MemKind, usize);

/// One piece of a multi-piece send: `src` (local) into the peer's `kind`
/// buffer at `offset`.
pub(crate) type Piece = (DeviceMem, MemKind, usize);

/// Enqueues one step: receive a transfer over `from` (if any) and send
/// `send` (if any). The receiver acks first, so the sender only writes once
/// the receiver has finished with the landing area; both acks go out before
/// either side waits, so a rank that receives from its left and sends to
/// its right in the same step cannot deadlock a chain or ring.
pub(crate) fn step(s: &Stream, from: Option<&LinkHandle>, send: Option<Send<'_>>) -> Result<()> {
    let send = send.map(|(l, src, kind, off)| (l, [(src.clone(), kind, off)]));
    step_pieces(
        s,
        from.map(|l| (l, 1)),
        send.as_ref().map(|(l, p)| (*l, &p[..])),
    )
}

/// [`step`] for data that is not contiguous: receive `n` transfers over
/// `from` and send every piece over the send link, all under one ack, so
/// the pieces cost one handshake and count as one step.
pub(crate) fn step_pieces(
    s: &Stream,
    from: Option<(&LinkHandle, usize)>,
    send: Option<(&LinkHandle, &[Piece])>,
) -> Result<()> {
    if let Some((l, _)) = from {
        l.tx_ack(s)?;
    }
    if let Some((l, pieces)) = send {
        l.rx_ack(s)?;
        for (src, kind, off) in pieces {
            l.tx_async(*kind, *off, src, s)?;
        }
    }
    if let Some((l, n)) = from {
        for _ in 0..n {
            l.rx_wait_done(s)?;
        }
    }
    if let Some((l, _)) = send {
        l.tx_wait_done(s)?;
    }
    Ok(())
}
