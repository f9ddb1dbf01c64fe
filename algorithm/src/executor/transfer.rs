//! One communication step on the link verbs: receive from one peer, send to
//! another (or the same) peer, with the handshake that makes a write into
//! the peer's buffer safe. Every point-to-point executor step is this.

use hccl_platform::{DeviceMem, LinkHandle, MemKind, Result, Stream};

/// What a step sends: `src` (local) through `link` into the peer's `kind`
/// buffer at `offset`.
pub(crate) type Send<'a> = (&'a LinkHandle, &'a DeviceMem, MemKind, usize);

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
