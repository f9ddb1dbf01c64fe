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
/// `send` (if any). See [`exchange`].
pub(crate) fn step(s: &Stream, from: Option<&LinkHandle>, send: Option<Send<'_>>) -> Result<()> {
    exchange(s, from.as_slice(), send.as_slice())
}

/// Enqueues one step with several peers at once: receive one transfer over
/// each link of `from` and make each send of `sends`. The receiver acks
/// first, so the sender only writes once the receiver has finished with
/// the landing area; every ack goes out before any wait, so ranks that
/// receive from some peers and send to others in the same step (a chain, a
/// ring, a mesh) cannot deadlock.
pub(crate) fn exchange(s: &Stream, from: &[&LinkHandle], sends: &[Send<'_>]) -> Result<()> {
    for l in from {
        l.tx_ack(s)?;
    }
    for (l, src, kind, off) in sends {
        l.rx_ack(s)?;
        l.tx_async(*kind, *off, src, s)?;
    }
    for l in from {
        l.rx_wait_done(s)?;
    }
    for (l, ..) in sends {
        l.tx_wait_done(s)?;
    }
    Ok(())
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
