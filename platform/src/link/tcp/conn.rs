//! One peer's connection: its sockets, what arrived on them, and the frame
//! on its way out.
//!
//! Every socket is non-blocking. Whoever waits on the link — the rank's
//! driver while it runs, the node's progress thread while the driver
//! sleeps — calls [`Conn::pump`], which reads whatever has arrived and
//! applies whole frames (a transfer goes straight into its target buffer;
//! acks and signals bump counters). Sends write as much as the socket
//! takes and keep the rest for the next poll of the same verb, so no
//! thread ever blocks on a peer that is not reading.
//!
//! Striping: a link may have several sockets. Socket 0 carries every
//! frame in order; a large transfer is cut into one part per socket, its
//! first part on socket 0 (saying how many parts there are), the others
//! on sockets 1.. in the same order as on socket 0, so the receiver counts
//! a transfer done once every socket has delivered its part of it.

use super::wire::{kind_from, Frame, Header, HEADER_LEN, MAX_BLOB};
use crate::error::{HcclError, Result};
use crate::link::OpDesc;
use crate::mem::DeviceMem;
use crate::sync::{AtomicBool, AtomicU32, AtomicU64, Mutex, Ordering};
use nix::sys::socket::{recv, sendmsg, MsgFlags};
use smallvec::SmallVec;
use std::collections::VecDeque;
use std::io::IoSlice;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::task::Poll;
use std::time::Duration;

/// Bytes of each socket's staging buffer: small frames arrive many to a
/// read; a transfer's payload larger than [`DIRECT_MIN`] skips it.
const STAGE: usize = 64 * 1024;
/// A transfer with at least this much still to come is read straight into
/// its target buffer, not through the staging buffer.
const DIRECT_MIN: usize = 16 * 1024;
/// Transfers at least this large are striped over all of a link's sockets.
pub(super) const STRIPE_MIN: usize = 256 * 1024;
/// Frames up to this size (header included) are gathered into the
/// connection's out-buffer and written together: one system call for the
/// descriptor, ack and data of a small op.
const GATHER_MAX: usize = 64 * 1024 + HEADER_LEN;
/// Gathered bytes past which the out-buffer is written at once.
const OUT_FLUSH: usize = 64 * 1024;
/// Gathered bytes past which more frames wait (a peer that reads nothing).
const OUT_MAX: usize = 4 << 20;
/// Largest transfer sent before the receiver's ack has arrived ("eager",
/// as MPI's TCP transport sends up to 64 KiB): the receiver holds it until
/// it has acked, so the sender saves the ack's round trip.
pub(super) const EAGER_MAX: usize = 64 * 1024;
/// How many acks ahead of those arrived a sender may send eagerly.
const EAGER_WINDOW: u64 = 4;
/// Most bytes a receiver holds for transfers that came before its ack.
const MAX_HELD: usize = 64 << 20;

/// Counters a peer raises on this rank, and what is known of the peer.
#[derive(Debug, Default)]
pub(super) struct Inbox {
    pub acks: AtomicU64,
    pub signals: AtomicU64,
    pub dones: AtomicU64,
    pub aborted: AtomicBool,
    pub reason: Mutex<String>,
    pub descs: Mutex<VecDeque<OpDesc>>,
    pub desc_count: AtomicU64,
    /// The peer said goodbye: its closing the socket is not an error to log.
    pub closed: AtomicBool,
    /// The connection ended without a goodbye: the peer is gone.
    pub lost: AtomicBool,
    /// The kernel dropped the connection (`ETIMEDOUT`): the link failed,
    /// the peer process may live on.
    pub dropped: AtomicBool,
    /// The peer's end reset the connection (`ECONNRESET`): its process
    /// died, or its end dropped the link.
    pub reset: AtomicBool,
    /// The peer's process id (its first frame; 0 until then).
    pub pid: AtomicU32,
    /// The peer's host, for messages.
    pub host: Mutex<String>,
}

impl Inbox {
    /// "rank 3 (process 1234 on host node-b)", as far as known.
    pub fn describe(&self, peer: u32) -> String {
        let pid = self.pid.load(Ordering::Relaxed);
        let host = self.host.lock().map(|h| h.clone()).unwrap_or_default();
        crate::link::describe_peer(peer, (pid != 0).then_some(pid), &host)
    }

    /// The error naming the lost peer `peer`, saying how it was found.
    pub fn lost_error(&self, peer: u32, how: &str) -> HcclError {
        let pid = self.pid.load(Ordering::Relaxed);
        let host = self.host.lock().map(|h| h.clone()).unwrap_or_default();
        crate::link::lost_peer_error(peer, (pid != 0).then_some(pid), &host, how)
    }

    /// Records the first reason the link broke and fails its waits.
    pub fn fail(&self, reason: &str) {
        if let Ok(mut r) = self.reason.lock() {
            if r.is_empty() {
                *r = reason.to_owned();
            }
        }
        self.aborted.store(true, Ordering::Release);
    }
}

/// A transfer that arrived before this rank's ack allowed it: its bytes,
/// where they go, and the ack they wait for.
#[derive(Debug)]
struct Held {
    bytes: Vec<u8>,
    target: usize,
    ack: u64,
}

/// A frame body being received on one socket.
#[derive(Debug)]
enum Body {
    /// A transfer (or a part of one) into memory at `addr`.
    Data {
        addr: usize,
        len: usize,
        got: usize,
        /// On socket 0: the part count (1 = not striped); elsewhere 0.
        parts: u32,
        /// Set when the transfer is received into a buffer of its own
        /// (`addr` points into it) to be applied once this rank acks.
        held: Option<Held>,
    },
    /// A small frame received whole through the staging buffer.
    Blob { frame: Frame, len: usize },
}

#[derive(Debug)]
struct SockRx {
    stage: Box<[u8]>,
    start: usize,
    end: usize,
    body: Option<Body>,
}

/// A transfer complete on socket 0 that is not yet counted because an
/// earlier one waits for parts from other sockets.
#[derive(Debug)]
enum Pending {
    Plain,
    /// The m-th striped transfer (1-based).
    Split(u64),
}

/// The receiving side of a connection (behind one lock: whoever holds it
/// reads every socket of the connection).
#[derive(Debug)]
pub(super) struct ConnRx {
    socks: Vec<SockRx>,
    order: VecDeque<Pending>,
    striped_seen: u64,
    parts_done: Vec<u64>,
    /// Acks this rank has issued on the link (its `TxAck`s so far).
    issued: u64,
    /// Transfers that came before the ack they need, in arrival order.
    held: VecDeque<Held>,
    held_bytes: usize,
}

/// One socket's share of a frame on its way out.
#[derive(Debug)]
struct Part {
    sock: usize,
    header: [u8; HEADER_LEN],
    addr: usize,
    len: usize,
    sent: usize,
}

#[derive(Debug)]
struct InFlight {
    ticket: u64,
    parts: SmallVec<[Part; 4]>,
    /// The payload when the frame owns it (descriptors, abort reasons);
    /// parts point into it, and a `Vec`'s buffer does not move.
    _owned: Vec<u8>,
}

/// The sending side of a connection: small frames are gathered into
/// `out` and written together; one large frame at a time is in flight
/// after them, so frames never interleave on a socket.
#[derive(Debug, Default)]
pub(super) struct ConnTx {
    next_ticket: u64,
    busy: Option<InFlight>,
    out: Vec<u8>,
    out_sent: usize,
    /// The peer's acks this side has taken (its `RxAck`s and
    /// `TxAfterAck`s so far): what a transfer sent now needs.
    acks_taken: u64,
}

/// Whether a frame takes one of the peer's acks before it goes.
#[derive(Clone, Copy, Debug)]
pub(super) enum AckRule {
    /// No: a signal, or a transfer whose step took its ack already.
    None,
    /// Yes (`TxAfterAck`): `received` acks have arrived; the frame may go
    /// before its own if `eager` (small enough) and within the window.
    Take { received: u64, eager: bool },
}

/// What a frame carries.
pub(super) enum Payload<'a> {
    /// Memory the sending verb keeps alive until the send completes.
    Borrowed(&'a [u8]),
    /// Bytes the frame keeps itself.
    Owned(Vec<u8>),
}

impl Payload<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            Payload::Borrowed(b) => b,
            Payload::Owned(v) => v,
        }
    }
}

/// One rank's connection to one peer.
#[derive(Debug)]
pub(super) struct Conn {
    pub peer: u32,
    pub socks: Vec<TcpStream>,
    pub rx: Mutex<ConnRx>,
    pub tx: Mutex<ConnTx>,
    pub inbox: Inbox,
    /// A send found a socket full: while the driver sleeps, the progress
    /// thread watches for room and wakes it.
    pub want_write: AtomicBool,
    /// The connection failed: nobody reads it any more.
    pub dead: AtomicBool,
    /// Gathered frames wait in the out-buffer.
    pub has_out: AtomicBool,
    /// The link's `TCP_USER_TIMEOUT`, for messages.
    pub link_timeout: Option<Duration>,
}

/// Whether a socket error says the network failed rather than the peer
/// process: the kernel gave up retransmitting (`ETIMEDOUT`, reported as
/// the last soft error when there was one, e.g. no route while an
/// interface was down).
fn link_failed(e: nix::errno::Errno) -> bool {
    use nix::errno::Errno;
    matches!(
        e,
        Errno::ETIMEDOUT
            | Errno::EHOSTUNREACH
            | Errno::ENETUNREACH
            | Errno::ENETDOWN
            | Errno::EHOSTDOWN
    )
}

fn would_block(e: nix::errno::Errno) -> bool {
    e == nix::errno::Errno::EAGAIN || e == nix::errno::Errno::EWOULDBLOCK
}

impl Conn {
    /// A connection over `socks` (non-blocking, set up), socket 0 first.
    pub fn new(peer: u32, socks: Vec<TcpStream>, link_timeout: Option<Duration>) -> Conn {
        let n = socks.len();
        Conn {
            peer,
            rx: Mutex::new(ConnRx {
                socks: (0..n)
                    .map(|_| SockRx {
                        stage: vec![0u8; STAGE].into_boxed_slice(),
                        start: 0,
                        end: 0,
                        body: None,
                    })
                    .collect(),
                order: VecDeque::new(),
                striped_seen: 0,
                parts_done: vec![0; n],
                issued: 0,
                held: VecDeque::new(),
                held_bytes: 0,
            }),
            socks,
            tx: Mutex::new(ConnTx::default()),
            inbox: Inbox::default(),
            want_write: AtomicBool::new(false),
            dead: AtomicBool::new(false),
            has_out: AtomicBool::new(false),
            link_timeout,
        }
    }

    /// Reads what has arrived on every socket and applies whole frames,
    /// unless another thread is reading this connection right now.
    /// `Ok(true)` if a frame was applied. An error means the connection
    /// broke (the caller fails it).
    pub fn pump(&self, mems: &Mutex<[Option<DeviceMem>; 5]>) -> Result<bool> {
        if self.dead.load(Ordering::Acquire) {
            return Ok(false);
        }
        let Ok(mut rx) = self.rx.try_lock() else {
            return Ok(false);
        };
        let mut progressed = false;
        for k in 0..self.socks.len() {
            progressed |= self.pump_sock(&mut rx, k, mems)?;
        }
        Ok(progressed)
    }

    fn pump_sock(
        &self,
        rx: &mut ConnRx,
        k: usize,
        mems: &Mutex<[Option<DeviceMem>; 5]>,
    ) -> Result<bool> {
        let fd = self.socks[k].as_raw_fd();
        let mut progressed = false;
        // A read that returned less than it asked for emptied the socket:
        // asking again would only cost a system call to hear "would block".
        let mut drained = false;
        loop {
            let s = &mut rx.socks[k];
            match &mut s.body {
                Some(Body::Data {
                    addr,
                    len,
                    got,
                    parts,
                    ..
                }) => {
                    let (addr, len, parts) = (*addr, *len, *parts);
                    let staged = (s.end - s.start).min(len - *got);
                    if staged > 0 {
                        // SAFETY: `addr..addr+len` is a range of a
                        // registered buffer (checked by `range` when the
                        // header arrived) that the peer may write: this
                        // rank acked it free, so no task touches it now.
                        let dst = unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, len) };
                        dst[*got..*got + staged]
                            .copy_from_slice(&s.stage[s.start..s.start + staged]);
                        *got += staged;
                        s.start += staged;
                    }
                    if *got == len {
                        let Some(Body::Data { held, .. }) = s.body.take() else {
                            unreachable!("matched a transfer body");
                        };
                        match held {
                            Some(h) => {
                                rx.held.push_back(h);
                                progressed |= self.apply_held(rx);
                            }
                            None => {
                                self.transfer_done(rx, k, parts);
                                progressed = true;
                            }
                        }
                        continue;
                    }
                    if len - *got >= DIRECT_MIN {
                        if drained {
                            return Ok(progressed);
                        }
                        // SAFETY: as above.
                        let dst = unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, len) };
                        let want = len - *got;
                        match recv(fd, &mut dst[*got..], MsgFlags::MSG_DONTWAIT) {
                            Ok(0) => return Err(self.eof()),
                            Ok(n) => {
                                *got += n;
                                drained = n < want;
                            }
                            Err(nix::errno::Errno::EINTR) => {}
                            Err(e) if would_block(e) => return Ok(progressed),
                            Err(e) => return Err(self.broken(e)),
                        }
                        continue;
                    }
                }
                Some(Body::Blob { frame, len }) => {
                    let (frame, len) = (*frame, *len);
                    if s.end - s.start >= len {
                        let at = s.start;
                        s.start += len;
                        s.body = None;
                        self.apply_blob(frame, &s.stage[at..at + len])?;
                        progressed = true;
                        continue;
                    }
                }
                None => {
                    if s.end - s.start >= HEADER_LEN {
                        let h: [u8; HEADER_LEN] = s.stage[s.start..s.start + HEADER_LEN]
                            .try_into()
                            .expect("32 bytes");
                        s.start += HEADER_LEN;
                        let h = Header::decode(&h).map_err(HcclError::tcp_transfer)?;
                        progressed |= self.start_frame(rx, k, h, mems)?;
                        continue;
                    }
                }
            }
            // Need more bytes in the staging buffer.
            if drained {
                return Ok(progressed);
            }
            let s = &mut rx.socks[k];
            if s.start == s.end {
                s.start = 0;
                s.end = 0;
            } else if s.start > STAGE / 2 {
                s.stage.copy_within(s.start..s.end, 0);
                s.end -= s.start;
                s.start = 0;
            }
            let want = STAGE - s.end;
            match recv(fd, &mut s.stage[s.end..], MsgFlags::MSG_DONTWAIT) {
                Ok(0) => return Err(self.eof()),
                Ok(n) => {
                    s.end += n;
                    drained = n < want;
                }
                Err(nix::errno::Errno::EINTR) => {}
                Err(e) if would_block(e) => return Ok(progressed),
                Err(e) => return Err(self.broken(e)),
            }
        }
    }

    /// Acts on a header just read on socket `k`: counts a signal, or sets
    /// up the body to receive. `Ok(true)` if a whole frame was applied.
    fn start_frame(
        &self,
        rx: &mut ConnRx,
        k: usize,
        h: Header,
        mems: &Mutex<[Option<DeviceMem>; 5]>,
    ) -> Result<bool> {
        let inbox = &self.inbox;
        if k > 0 && h.frame != Frame::Data {
            return Err(HcclError::tcp_transfer(format!(
                "malformed frame ({:?} on striping socket {k})",
                h.frame
            )));
        }
        match h.frame {
            Frame::Ack => {
                inbox.acks.fetch_add(1, Ordering::Release);
            }
            Frame::Signal => {
                inbox.signals.fetch_add(1, Ordering::Release);
            }
            Frame::Ident => {
                inbox.pid.store(h.off as u32, Ordering::Relaxed);
            }
            Frame::Bye => {
                inbox.closed.store(true, Ordering::Release);
                return Err(HcclError::remote(format!(
                    "peer {} destroyed its communicator",
                    inbox.describe(self.peer)
                )));
            }
            Frame::Desc | Frame::Abort => {
                let len = h.len as usize;
                if h.frame == Frame::Desc && len != OpDesc::WIRE {
                    return Err(HcclError::tcp_transfer(format!(
                        "malformed frame (descriptor of {len} bytes)"
                    )));
                }
                debug_assert!(len <= MAX_BLOB);
                rx.socks[k].body = Some(Body::Blob {
                    frame: h.frame,
                    len,
                });
                return Ok(false);
            }
            Frame::Data => {
                let kind = kind_from(h.kind)
                    .ok_or_else(|| HcclError::tcp_transfer("malformed frame (memory kind)"))?;
                let parts = if k == 0 { h.parts } else { 0 };
                if k == 0 && (parts == 0 || (parts > 1 && parts as usize != self.socks.len())) {
                    return Err(HcclError::tcp_transfer(format!(
                        "malformed frame (a transfer in {parts} parts over {} sockets)",
                        self.socks.len()
                    )));
                }
                let (off, len) = (h.off as usize, h.len as usize);
                let target = mems.lock().unwrap_or_else(|p| p.into_inner())[kind.index()]
                    .as_ref()
                    .ok_or_else(|| {
                        HcclError::tcp_transfer(format!("peer wrote to unregistered {kind} buffer"))
                    })?
                    .range(off, len)?;
                // A transfer sent before this rank's ack (or behind one
                // that was) waits in a buffer of its own; striped ones are
                // never sent early.
                let early = parts == 1 && (h.ack > rx.issued || !rx.held.is_empty());
                if early {
                    if rx.held_bytes + len > MAX_HELD {
                        return Err(HcclError::tcp_transfer(format!(
                            "peer rank {} sent more than {MAX_HELD} bytes ahead of this rank's acks",
                            self.peer
                        )));
                    }
                    rx.held_bytes += len;
                    let mut bytes = vec![0u8; len];
                    let addr = bytes.as_mut_ptr() as usize;
                    let held = Held {
                        bytes,
                        target: target.ptr() as usize,
                        ack: h.ack,
                    };
                    if len == 0 {
                        rx.held.push_back(held);
                        return Ok(self.apply_held(rx));
                    }
                    rx.socks[k].body = Some(Body::Data {
                        addr,
                        len,
                        got: 0,
                        parts,
                        held: Some(held),
                    });
                    return Ok(false);
                }
                if len == 0 {
                    self.transfer_done(rx, k, parts);
                    return Ok(true);
                }
                rx.socks[k].body = Some(Body::Data {
                    addr: target.ptr() as usize,
                    len,
                    got: 0,
                    parts,
                    held: None,
                });
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn apply_blob(&self, frame: Frame, bytes: &[u8]) -> Result<()> {
        let inbox = &self.inbox;
        match frame {
            Frame::Desc => {
                let b: &[u8; OpDesc::WIRE] = bytes
                    .try_into()
                    .map_err(|_| HcclError::tcp_transfer("malformed frame (descriptor length)"))?;
                inbox
                    .descs
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push_back(OpDesc::from_bytes(b));
                inbox.desc_count.fetch_add(1, Ordering::Release);
            }
            _ => {
                // an abort: the peer failed and says why
                inbox.fail(&String::from_utf8_lossy(bytes));
            }
        }
        Ok(())
    }

    /// This rank acks (its `TxAck`): the landing area is free, so the
    /// transfers that came early for this ack go into place now.
    pub fn issue_ack(&self) {
        let mut rx = self.rx.lock().unwrap_or_else(|p| p.into_inner());
        rx.issued += 1;
        self.apply_held(&mut rx);
    }

    /// Puts the held transfers whose ack has been issued into place, in
    /// order. `true` if any was.
    fn apply_held(&self, rx: &mut ConnRx) -> bool {
        let mut any = false;
        while rx.held.front().is_some_and(|h| h.ack <= rx.issued) {
            any = true;
            let h = rx.held.pop_front().expect("checked");
            rx.held_bytes -= h.bytes.len();
            if !h.bytes.is_empty() {
                // SAFETY: `target` is the range of a registered buffer the
                // peer addressed (checked by `range` when the header
                // arrived); this rank has just acked it free.
                let dst =
                    unsafe { std::slice::from_raw_parts_mut(h.target as *mut u8, h.bytes.len()) };
                dst.copy_from_slice(&h.bytes);
            }
            self.transfer_done(rx, 0, 1);
        }
        any
    }

    /// The sequence number of the next of the peer's acks this side
    /// waits for (an `RxAck`).
    pub fn take_ack(&self) -> u64 {
        let mut tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        tx.acks_taken += 1;
        tx.acks_taken
    }

    /// Counts a transfer (or part) complete on socket `k`, in order.
    fn transfer_done(&self, rx: &mut ConnRx, k: usize, parts: u32) {
        let dones = &self.inbox.dones;
        if k == 0 && parts == 1 && rx.order.is_empty() {
            dones.fetch_add(1, Ordering::Release);
            return;
        }
        if k == 0 {
            if parts == 1 {
                rx.order.push_back(Pending::Plain);
            } else {
                rx.striped_seen += 1;
                rx.order.push_back(Pending::Split(rx.striped_seen));
            }
        } else {
            rx.parts_done[k] += 1;
        }
        while let Some(p) = rx.order.front() {
            let complete = match p {
                Pending::Plain => true,
                Pending::Split(m) => rx.parts_done[1..].iter().all(|d| d >= m),
            };
            if !complete {
                break;
            }
            rx.order.pop_front();
            dones.fetch_add(1, Ordering::Release);
        }
    }

    fn eof(&self) -> HcclError {
        HcclError::tcp_transfer("end of stream")
    }

    fn broken(&self, e: nix::errno::Errno) -> HcclError {
        if link_failed(e) {
            return self.dropped(e);
        }
        if e == nix::errno::Errno::ECONNRESET {
            self.inbox.reset.store(true, Ordering::Release);
        }
        HcclError::tcp_transfer(format!(
            "peer rank {} closed or broke the link: {e}",
            self.peer
        ))
    }

    /// The kernel gave up on the connection ([`link_failed`]: data went
    /// unacknowledged past the link timeout, or keep-alive probes went
    /// unanswered): the network or the peer's host failed, which says
    /// nothing of the peer process, so it is not marked lost.
    fn dropped(&self, e: nix::errno::Errno) -> HcclError {
        self.inbox.dropped.store(true, Ordering::Release);
        let waited = match self.link_timeout {
            Some(t) => format!(
                "data sent on it went unacknowledged for {} ms (HCCL_RS_TCP_LINK_TIMEOUT_MS)",
                t.as_millis()
            ),
            None => "the kernel gave up retransmitting".to_owned(),
        };
        HcclError::tcp_transfer(format!(
            "{waited}: the network between the hosts or the peer's host stopped answering ({e})"
        ))
        .peer(self.peer)
    }

    /// Sends one frame for the verb whose progress is `ticket` (`None` on
    /// its first poll; a large frame's ticket afterwards). `Ready(true)`
    /// when the frame was gathered into the out-buffer (the caller has a
    /// flush asked for), `Ready(false)` when every byte is in the kernel's
    /// hands; `Pending` while a socket is full, another large frame is in
    /// flight, or (`AckRule::Take`) the ack it needs has not come.
    pub fn send(
        &self,
        ticket: &mut Option<u64>,
        mut header: Header,
        payload: Payload<'_>,
        ack: AckRule,
    ) -> Poll<Result<bool>> {
        let mut tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = *ticket {
            if tx.busy.as_ref().is_none_or(|f| f.ticket != t) {
                return Poll::Ready(Err(HcclError::internal(
                    "a TCP send lost its place in the connection's queue",
                )));
            }
            return self.push_busy(&mut tx).map(|r| r.map(|()| false));
        }
        if tx.busy.is_some() {
            return Poll::Pending;
        }
        let len = payload.bytes().len();
        let gather = HEADER_LEN + len <= GATHER_MAX;
        if gather && tx.out.len() - tx.out_sent >= OUT_MAX {
            return match self.flush_locked(&mut tx) {
                Err(e) => Poll::Ready(Err(e)),
                Ok(_) => Poll::Pending,
            };
        }
        if !gather && tx.out_sent < tx.out.len() {
            match self.flush_locked(&mut tx) {
                Err(e) => return Poll::Ready(Err(e)),
                Ok(false) => return Poll::Pending,
                Ok(true) => {}
            }
        }
        if let AckRule::Take { received, eager } = ack {
            let next = tx.acks_taken + 1;
            let early_ok = eager && len <= EAGER_MAX && next <= received + EAGER_WINDOW;
            if received < next && !early_ok {
                return Poll::Pending;
            }
            tx.acks_taken = next;
        }
        if header.frame == Frame::Data {
            header.ack = tx.acks_taken;
        }
        if gather {
            tx.out.extend_from_slice(&header.encode());
            tx.out.extend_from_slice(payload.bytes());
            self.has_out.store(true, Ordering::Release);
            if tx.out.len() - tx.out_sent >= OUT_FLUSH {
                if let Err(e) = self.flush_locked(&mut tx) {
                    return Poll::Ready(Err(e));
                }
            }
            return Poll::Ready(Ok(true));
        }
        tx.next_ticket += 1;
        let t = tx.next_ticket;
        *ticket = Some(t);
        tx.busy = Some(self.frame(t, header, payload));
        self.push_busy(&mut tx).map(|r| r.map(|()| false))
    }

    fn push_busy(&self, tx: &mut ConnTx) -> Poll<Result<()>> {
        match self.push(tx.busy.as_mut().expect("a frame in flight")) {
            Ok(true) => {
                tx.busy = None;
                Poll::Ready(Ok(()))
            }
            Ok(false) => {
                self.want_write.store(true, Ordering::Release);
                Poll::Pending
            }
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    /// Writes the gathered frames. `Ok(true)` when none is left.
    pub fn flush(&self) -> Result<bool> {
        if !self.has_out.load(Ordering::Acquire) {
            return Ok(true);
        }
        let mut tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        self.flush_locked(&mut tx)
    }

    fn flush_locked(&self, tx: &mut ConnTx) -> Result<bool> {
        let fd = self.socks[0].as_raw_fd();
        while tx.out_sent < tx.out.len() {
            let r = nix::sys::socket::send(
                fd,
                &tx.out[tx.out_sent..],
                MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
            );
            match r {
                Ok(n) => tx.out_sent += n,
                Err(nix::errno::Errno::EINTR) => {}
                Err(e) if would_block(e) => {
                    self.want_write.store(true, Ordering::Release);
                    return Ok(false);
                }
                Err(e) => return Err(self.send_failed(e)),
            }
        }
        tx.out.clear();
        tx.out_sent = 0;
        self.has_out.store(false, Ordering::Release);
        Ok(true)
    }

    /// Sends a frame outside any verb (an abort, a goodbye), waiting up to
    /// `limit` for room. Gives up if a large frame is half sent: the
    /// connection is going away anyway, and the peer then sees it close.
    pub fn send_now(
        &self,
        header: Header,
        payload: Vec<u8>,
        limit: std::time::Duration,
    ) -> Result<()> {
        let deadline = std::time::Instant::now() + limit;
        let mut ticket = None;
        loop {
            let r = self.send(
                &mut ticket,
                header,
                Payload::Owned(payload.clone()),
                AckRule::None,
            );
            match r {
                Poll::Ready(Ok(true)) => {
                    if self.flush()? {
                        return Ok(());
                    }
                    break;
                }
                Poll::Ready(Ok(false)) => return Ok(()),
                Poll::Ready(Err(e)) => return Err(e),
                Poll::Pending if ticket.is_none() && self.tx_busy() => {
                    return Err(HcclError::tcp_transfer(
                        "another frame is half sent on the connection",
                    ))
                }
                Poll::Pending => {}
            }
            if !self.wait_room(deadline) {
                return Err(HcclError::tcp_transfer("the peer does not take data"));
            }
        }
        // gathered: write it out within the limit
        loop {
            if !self.wait_room(deadline) {
                return Err(HcclError::tcp_transfer("the peer does not take data"));
            }
            if self.flush()? {
                return Ok(());
            }
        }
    }

    fn tx_busy(&self) -> bool {
        self.tx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .busy
            .is_some()
    }

    /// Waits until a socket has room or `deadline` passes (`false`).
    fn wait_room(&self, deadline: std::time::Instant) -> bool {
        let now = std::time::Instant::now();
        if now >= deadline {
            return false;
        }
        let mut fds: Vec<_> = self
            .socks
            .iter()
            .map(|s| rustix::event::PollFd::new(s, rustix::event::PollFlags::OUT))
            .collect();
        let left = deadline - now;
        let t = rustix::event::Timespec {
            tv_sec: left.as_secs() as i64,
            tv_nsec: left.subsec_nanos() as i64,
        };
        let _ = rustix::event::poll(&mut fds, Some(&t));
        true
    }

    fn frame(&self, ticket: u64, header: Header, payload: Payload<'_>) -> InFlight {
        let (owned, addr, len) = match payload {
            Payload::Borrowed(b) => (Vec::new(), b.as_ptr() as usize, b.len()),
            Payload::Owned(v) => {
                let (a, l) = (v.as_ptr() as usize, v.len());
                (v, a, l)
            }
        };
        let n = self.socks.len();
        let mut parts = SmallVec::new();
        if header.frame == Frame::Data && n > 1 && len >= STRIPE_MIN {
            // cut at 4 KiB boundaries so each part copies whole pages
            let per = len.div_ceil(n).div_ceil(4096) * 4096;
            for k in 0..n {
                let start = (k * per).min(len);
                let end = ((k + 1) * per).min(len);
                let h = Header {
                    parts: if k == 0 { n as u32 } else { 0 },
                    off: header.off + start as u64,
                    len: (end - start) as u64,
                    ..header
                };
                parts.push(Part {
                    sock: k,
                    header: h.encode(),
                    addr: addr + start,
                    len: end - start,
                    sent: 0,
                });
            }
        } else {
            parts.push(Part {
                sock: 0,
                header: header.encode(),
                addr,
                len,
                sent: 0,
            });
        }
        InFlight {
            ticket,
            parts,
            _owned: owned,
        }
    }

    /// Writes as much of `f` as the sockets take. `Ok(true)` when all of
    /// it has been written.
    fn push(&self, f: &mut InFlight) -> Result<bool> {
        let mut all = true;
        for p in f.parts.iter_mut() {
            let total = HEADER_LEN + p.len;
            while p.sent < total {
                // SAFETY: `addr..addr+len` is the payload: memory the
                // sending verb pins until this send completes (it is
                // polled again only while it lives), or the frame's own
                // `Vec`. It is only read.
                let payload = unsafe { std::slice::from_raw_parts(p.addr as *const u8, p.len) };
                let (hdr, body) = if p.sent < HEADER_LEN {
                    (&p.header[p.sent..], payload)
                } else {
                    (&[][..], &payload[p.sent - HEADER_LEN..])
                };
                let iov = [IoSlice::new(hdr), IoSlice::new(body)];
                let r = sendmsg::<()>(
                    self.socks[p.sock].as_raw_fd(),
                    &iov,
                    &[],
                    MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
                    None,
                );
                match r {
                    Ok(n) => p.sent += n,
                    Err(nix::errno::Errno::EINTR) => {}
                    Err(e) if would_block(e) => {
                        all = false;
                        break;
                    }
                    Err(e) => return Err(self.send_failed(e)),
                }
            }
        }
        Ok(all)
    }

    fn send_failed(&self, e: nix::errno::Errno) -> HcclError {
        use nix::errno::Errno;
        if link_failed(e) {
            return self.dropped(e);
        }
        let inbox = &self.inbox;
        if matches!(e, Errno::EPIPE | Errno::ECONNRESET | Errno::ECONNABORTED)
            || inbox.lost.load(Ordering::Acquire)
        {
            inbox.lost.store(true, Ordering::Release);
            return inbox.lost_error(
                self.peer,
                &format!("broke its connection (sending to it failed: {e})"),
            );
        }
        HcclError::tcp_transfer(format!("sending to rank {}: {e}", self.peer)).peer(self.peer)
    }
}
