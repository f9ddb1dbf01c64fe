//! One communication step on the link verbs: receive from one peer, send to
//! another (or the same) peer, with the handshake that makes a write into
//! the peer's buffer safe. Every point-to-point executor step is this.

use hccl_platform::{DeviceMem, LinkHandle, MemKind, Result, Stream};

/// What a step sends: `src` (local) through `link` into the peer's `kind`
/// buffer at `offset`.
pub(crate) type Send<'a> = (&'a LinkHandle, &'a DeviceMem, MemKind, usize);

/// Enqueues one step: receive a transfer over `from` (if any) and send
/// `send` (if any). The receiver acks first, so the sender only writes once
/// the receiver has finished with the landing area; both acks go out before
/// either side waits, so a rank that receives from its left and sends to
/// its right in the same step cannot deadlock a chain or ring.
pub(crate) fn step(s: &Stream, from: Option<&LinkHandle>, send: Option<Send<'_>>) -> Result<()> {
    if let Some(l) = from {
        l.tx_ack(s)?;
    }
    if let Some((l, src, kind, off)) = send {
        l.rx_ack(s)?;
        l.tx_async(kind, off, src, s)?;
    }
    if let Some(l) = from {
        l.rx_wait_done(s)?;
    }
    if let Some((l, ..)) = send {
        l.tx_wait_done(s)?;
    }
    Ok(())
}
