//! The control plane of a communicator whose ranks are processes: one TCP
//! connection between every pair of ranks, beside the data links, for
//! what must reach every rank whatever its data links are doing — a
//! revocation ([`crate::revoke`]) — and that notices a peer process gone
//! (its kernel closes the connection; a peer that destroys its
//! communicator says goodbye first, which is not a loss).
//!
//! Connections: each rank listens before the rank table is exchanged (its
//! address travels in the table under the `ctrl` component) and, once the
//! table is known, connects to every lower rank and introduces itself
//! with the group's unique id. One thread per communicator reads every
//! connection (`poll(2)`) and hands each message to the communicator's
//! handler (messages that arrive before it is installed wait for it).
//! Sends go from any thread, a whole frame under the connection's lock.
//!
//! A frame: `| len: u32 | kind: u8 | from: u32 | body |`, little-endian,
//! `len` counting what follows it.

use hccl_platform::{HcclError, Result};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The component name the control address is packed under in a rank's
/// transport addresses.
pub(crate) const CONTROL_COMPONENT: &str = "ctrl";

/// Largest frame body accepted (a revocation's reason is cut to fit; a
/// rank's info for a shrink is a few hundred bytes).
const MAX_BODY: usize = 64 * 1024;
/// Longest reason a revocation carries, bytes.
const MAX_REASON: usize = 1024;

/// A control message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Msg {
    /// The first frame of a connection each way: the group it belongs to,
    /// and the sender's process and host (for messages naming it lost).
    Hello {
        unique_id: [u8; 16],
        pid: u32,
        host: String,
    },
    /// The sender destroys its communicator: its connection closing next
    /// is not a loss.
    Bye,
    /// Rank `origin` revoked the communicator for `reason`.
    Revoke { origin: u32, reason: String },
    /// One rank's part of a [`Control::gather`] tagged `tag`.
    Part { tag: [u8; 16], blob: Vec<u8> },
}

impl Msg {
    fn encode(&self, from: u32) -> Vec<u8> {
        let (kind, body): (u8, Vec<u8>) = match self {
            Msg::Hello {
                unique_id,
                pid,
                host,
            } => {
                let mut b = unique_id.to_vec();
                b.extend_from_slice(&pid.to_le_bytes());
                b.extend_from_slice(&host.as_bytes()[..host.len().min(255)]);
                (1, b)
            }
            Msg::Bye => (2, Vec::new()),
            Msg::Revoke { origin, reason } => {
                let mut b = origin.to_le_bytes().to_vec();
                let mut cut = reason.len().min(MAX_REASON);
                while !reason.is_char_boundary(cut) {
                    cut -= 1;
                }
                b.extend_from_slice(&reason.as_bytes()[..cut]);
                (3, b)
            }
            Msg::Part { tag, blob } => {
                let mut b = tag.to_vec();
                b.extend_from_slice(blob);
                (4, b)
            }
        };
        let mut f = Vec::with_capacity(9 + body.len());
        f.extend_from_slice(&(5 + body.len() as u32).to_le_bytes());
        f.push(kind);
        f.extend_from_slice(&from.to_le_bytes());
        f.extend_from_slice(&body);
        f
    }

    /// The frame at the start of `buf`: `Ok(Some((from, msg, bytes used)))`,
    /// `Ok(None)` while incomplete, an error when malformed.
    fn decode(buf: &[u8]) -> Result<Option<(u32, Msg, usize)>> {
        if buf.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_le_bytes(buf[..4].try_into().expect("4 bytes")) as usize;
        if !(5..=5 + MAX_BODY).contains(&len) {
            return Err(HcclError::tcp_transfer(format!(
                "control frame of {len} bytes"
            )));
        }
        if buf.len() < 4 + len {
            return Ok(None);
        }
        let kind = buf[4];
        let from = u32::from_le_bytes(buf[5..9].try_into().expect("4 bytes"));
        let body = &buf[9..4 + len];
        let msg = match kind {
            1 if (20..=20 + 255).contains(&body.len()) => Msg::Hello {
                unique_id: body[..16].try_into().expect("16 bytes"),
                pid: u32::from_le_bytes(body[16..20].try_into().expect("4 bytes")),
                host: String::from_utf8_lossy(&body[20..]).into_owned(),
            },
            2 if body.is_empty() => Msg::Bye,
            3 if body.len() >= 4 => Msg::Revoke {
                origin: u32::from_le_bytes(body[..4].try_into().expect("4 bytes")),
                reason: String::from_utf8_lossy(&body[4..]).into_owned(),
            },
            4 if body.len() >= 16 => Msg::Part {
                tag: body[..16].try_into().expect("16 bytes"),
                blob: body[16..].to_vec(),
            },
            _ => {
                return Err(HcclError::tcp_transfer(format!(
                    "control frame of kind {kind} with {} bytes",
                    body.len()
                )))
            }
        };
        Ok(Some((from, msg, 4 + len)))
    }
}

/// What the communicator does when a rank is found lost.
pub(crate) type LostHook = Arc<dyn Fn(u32, Option<&(u32, String)>) + Send + Sync>;

/// A part of a gather received: `(tag, from, blob)`.
type Part = ([u8; 16], u32, Vec<u8>);

/// What the communicator does with a message: `(control, from, msg)`,
/// called on the control thread.
pub(crate) type Handler = Arc<dyn Fn(&Control, u32, Msg) + Send + Sync>;

/// A rank's listener, made before the rank table is exchanged.
#[derive(Debug)]
pub(crate) struct ControlListener {
    listener: TcpListener,
}

impl ControlListener {
    /// Listens on `ip`, any port.
    pub(crate) fn bind(ip: IpAddr) -> Result<ControlListener> {
        let listener = TcpListener::bind(SocketAddr::new(ip, 0))
            .map_err(|e| HcclError::from_io("listening for control connections", e))?;
        Ok(ControlListener { listener })
    }

    /// Where peers connect.
    pub(crate) fn addr(&self) -> Result<SocketAddr> {
        self.listener
            .local_addr()
            .map_err(|e| HcclError::from_io("reading the control listener's address", e))
    }
}

/// A handle on the control plane (cheap to clone): sends, and what it
/// knows of peers.
#[derive(Clone)]
pub(crate) struct Control(Arc<Shared>);

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Control")
            .field("rank", &self.0.rank)
            .finish()
    }
}

struct Shared {
    rank: u32,
    unique_id: [u8; 16],
    /// Every rank's control listener (`None`: unknown, e.g. a rank of a
    /// rank table).
    addrs: Vec<Option<SocketAddr>>,
    /// The connection to each rank, for sending (`None`: none yet).
    out: Vec<Mutex<Option<TcpStream>>>,
    /// Ranks whose connection closed without a goodbye.
    lost: Mutex<Vec<u32>>,
    /// Ranks that said goodbye (on any of their connections).
    gone_by_bye: Mutex<Vec<u32>>,
    /// Each rank's process id and host, from its Hello.
    processes: Mutex<Vec<Option<(u32, String)>>>,
    handler: Mutex<Option<Handler>>,
    /// Called on the control thread with a rank found lost.
    on_lost: Mutex<Option<LostHook>>,
    /// Messages that arrived before the handler was installed.
    pending: Mutex<Vec<(u32, Msg)>>,
    /// Connections made by senders, for the thread to read.
    fresh: Mutex<Vec<(u32, TcpStream)>>,
    /// Parts of gathers received.
    parts: Mutex<Vec<Part>>,
    /// Signalled when a part arrives or a rank is lost.
    parts_cv: Condvar,
    /// A byte here wakes the thread (a fresh connection, a stop).
    wake: UnixStream,
    stop: AtomicBool,
    io_timeout: Duration,
}

/// The control plane of one rank: the handle and its thread, stopped
/// (after a goodbye to every peer) when dropped.
pub(crate) struct ControlPlane {
    control: Control,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.control.fmt(f)
    }
}

impl ControlPlane {
    /// Starts rank `rank`'s control plane on `listener`, knowing every
    /// rank's control address `addrs`, and connects to every lower rank
    /// (each within `io_timeout`).
    pub(crate) fn start(
        listener: ControlListener,
        rank: u32,
        unique_id: [u8; 16],
        addrs: Vec<Option<SocketAddr>>,
        io_timeout: Duration,
    ) -> Result<ControlPlane> {
        let (wake, wake_rx) = UnixStream::pair()
            .map_err(|e| HcclError::from_io("making the control thread's wake pipe", e))?;
        let n = addrs.len();
        let shared = Arc::new(Shared {
            rank,
            unique_id,
            addrs,
            out: (0..n).map(|_| Mutex::new(None)).collect(),
            lost: Mutex::new(Vec::new()),
            gone_by_bye: Mutex::new(Vec::new()),
            processes: Mutex::new(vec![None; n]),
            handler: Mutex::new(None),
            on_lost: Mutex::new(None),
            pending: Mutex::new(Vec::new()),
            fresh: Mutex::new(Vec::new()),
            parts: Mutex::new(Vec::new()),
            parts_cv: Condvar::new(),
            wake,
            stop: AtomicBool::new(false),
            io_timeout,
        });
        listener
            .listener
            .set_nonblocking(true)
            .map_err(|e| HcclError::from_io("setting up the control listener", e))?;
        wake_rx
            .set_nonblocking(true)
            .map_err(|e| HcclError::from_io("setting up the control thread's wake pipe", e))?;
        let s2 = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("hccl-ctrl{rank}"))
            .spawn(move || run(&s2, listener.listener, wake_rx))
            .map_err(|e| HcclError::from_io("starting the control thread", e))?;
        let plane = ControlPlane {
            control: Control(shared),
            thread: Some(thread),
        };
        for peer in 0..rank {
            if plane.control.0.addrs[peer as usize].is_some() {
                // a peer that already finished (made, used and destroyed
                // its communicator) refuses: nothing to tell it any more
                if let Err(e) = plane.control.connect(peer) {
                    tracing::debug!(rank, peer, error = %e, "no control connection to a lower rank");
                }
            }
        }
        Ok(plane)
    }

    /// The handle.
    pub(crate) fn control(&self) -> &Control {
        &self.control
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        // the thread says goodbye on every connection it reads, then ends
        let sh = &self.control.0;
        sh.stop.store(true, Ordering::Release);
        let _ = (&sh.wake).write(&[1]);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // the handler may hold what holds this plane's owner: break the loop
        sh.handler.lock().unwrap_or_else(|p| p.into_inner()).take();
        sh.on_lost.lock().unwrap_or_else(|p| p.into_inner()).take();
    }
}

impl Shared {
    /// This rank's introduction.
    fn hello(&self) -> Msg {
        Msg::Hello {
            unique_id: self.unique_id,
            pid: std::process::id(),
            host: std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_owned())
                .unwrap_or_default(),
        }
    }

    fn note_process(&self, rank: u32, pid: u32, host: String) {
        if let Some(slot) = self
            .processes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(rank as usize)
        {
            *slot = Some((pid, host));
        }
    }
}

impl Control {
    /// Installs the handler and gives it what arrived before.
    pub(crate) fn set_handler(&self, h: Handler) {
        *self.0.handler.lock().unwrap_or_else(|p| p.into_inner()) = Some(h.clone());
        let early = std::mem::take(&mut *self.0.pending.lock().unwrap_or_else(|p| p.into_inner()));
        for (from, m) in early {
            h(self, from, m);
        }
    }

    /// Calls `f` with every rank found lost from now on (on the control
    /// thread, right when its connection closes).
    pub(crate) fn set_lost_hook(&self, f: LostHook) {
        *self.0.on_lost.lock().unwrap_or_else(|p| p.into_inner()) = Some(f);
    }

    /// Ranks whose control connection closed without a goodbye (their
    /// process is gone), in the order noticed.
    pub(crate) fn lost(&self) -> Vec<u32> {
        self.0
            .lost
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Ranks gone from this communicator: lost (closed without a
    /// goodbye) or departed (said goodbye: destroyed their communicator).
    pub(crate) fn gone(&self) -> Vec<u32> {
        let mut g = self.lost();
        for r in self
            .0
            .gone_by_bye
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            if !g.contains(r) {
                g.push(*r);
            }
        }
        g
    }

    /// Sends `msg` to every other rank except `except`, connecting where
    /// no connection exists yet; ranks known lost are skipped and a send
    /// that fails is logged (the flood goes on to the others).
    pub(crate) fn send_all(&self, except: Option<u32>, msg: &Msg) {
        let lost = self.lost();
        for peer in 0..self.0.out.len() as u32 {
            if peer == self.0.rank || Some(peer) == except || lost.contains(&peer) {
                continue;
            }
            if let Err(e) = self.send(peer, msg) {
                tracing::debug!(rank = self.0.rank, peer, error = %e, "control message not sent");
            }
        }
    }

    /// Sends `msg` to `peer`, connecting first if needed.
    pub(crate) fn send(&self, peer: u32, msg: &Msg) -> Result<()> {
        if self.send_existing(peer, msg)? {
            return Ok(());
        }
        self.connect(peer)?;
        if self.send_existing(peer, msg)? {
            Ok(())
        } else {
            Err(HcclError::tcp_transfer(format!(
                "no control connection to rank {peer}"
            )))
        }
    }

    /// Every member's blob, by position in `members` (ranks of this
    /// communicator, this rank among them): sends `mine` to the other
    /// members tagged `tag` and waits for theirs, up to `timeout`. A
    /// member lost meanwhile, or silent past `timeout`, is an error
    /// naming it. Parts of other tags stay for their own gathers.
    pub(crate) fn gather(
        &self,
        tag: [u8; 16],
        members: &[u32],
        mine: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<Vec<u8>>> {
        let got = self.gather_alive(tag, members, mine, timeout)?;
        let mut out = Vec::with_capacity(got.len());
        for (g, &m) in got.into_iter().zip(members) {
            match g {
                Some(b) => out.push(b),
                None => {
                    return Err(HcclError::remote(format!(
                        "rank {m} was lost while the ranks {members:?} exchanged their parts"
                    ))
                    .peer(m))
                }
            }
        }
        Ok(out)
    }

    /// [`gather`](Self::gather) that tolerates members lost: theirs is
    /// `None` (a member found lost before its part arrived). Only silence
    /// past `timeout` from a member not known lost is an error.
    pub(crate) fn gather_alive(
        &self,
        tag: [u8; 16],
        members: &[u32],
        mine: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<Option<Vec<u8>>>> {
        let sh = &self.0;
        let lost_at_start = self.gone();
        for &m in members
            .iter()
            .filter(|&&m| m != sh.rank && !lost_at_start.contains(&m))
        {
            // a member that dies now is found lost below
            if let Err(e) = self.send(
                m,
                &Msg::Part {
                    tag,
                    blob: mine.clone(),
                },
            ) {
                tracing::debug!(rank = sh.rank, peer = m, error = %e, "gather part not sent");
            }
        }
        let end = Instant::now() + timeout;
        let mut got: Vec<Option<Vec<u8>>> = members
            .iter()
            .map(|&m| (m == sh.rank).then(|| mine.clone()))
            .collect();
        let mut parts = sh.parts.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            let mut i = 0;
            while i < parts.len() {
                let (t, from, _) = &parts[i];
                match members.iter().position(|m| m == from) {
                    Some(k) if *t == tag && got[k].is_none() => {
                        got[k] = Some(parts.swap_remove(i).2);
                    }
                    _ => i += 1,
                }
            }
            let lost = self.gone();
            let missing: Vec<u32> = members
                .iter()
                .zip(&got)
                .filter(|(m, g)| g.is_none() && !lost.contains(m))
                .map(|(&m, _)| m)
                .collect();
            if missing.is_empty() {
                return Ok(got);
            }
            let now = Instant::now();
            if now >= end {
                return Err(HcclError::timeout(format!(
                    "ranks {missing:?} sent no part within {timeout:?} (HCCL_CONNECT_TIMEOUT)"
                )));
            }
            parts = sh
                .parts_cv
                .wait_timeout(parts, end - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// An id for `what` (e.g. `shrink/3`) of the communicator this control
    /// plane serves: every rank derives the same one, and no other
    /// communicator does (it tags gathers, and names new communicators).
    pub(crate) fn tag(&self, what: &str) -> [u8; 16] {
        let id: String = self
            .0
            .unique_id
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        crate::bootstrap::derived_unique_id(&format!("{id}/{what}"))
    }

    /// Where this rank's control plane listens (its host's address).
    pub(crate) fn own_addr(&self) -> Option<SocketAddr> {
        self.0.addrs.get(self.0.rank as usize).copied().flatten()
    }

    /// Sends on the connection to `peer` if there is one (`Ok(false)`: none).
    fn send_existing(&self, peer: u32, msg: &Msg) -> Result<bool> {
        let Some(slot) = self.0.out.get(peer as usize) else {
            return Err(HcclError::para(format!("no rank {peer}")));
        };
        let mut slot = slot.lock().unwrap_or_else(|p| p.into_inner());
        let Some(stream) = slot.as_mut() else {
            return Ok(false);
        };
        let frame = msg.encode(self.0.rank);
        match write_all_within(stream, &frame, self.0.io_timeout) {
            Ok(()) => Ok(true),
            Err(e) => {
                *slot = None;
                Err(e.peer(peer))
            }
        }
    }

    /// Connects to `peer`'s listener and introduces this rank; the thread
    /// reads the connection from then on.
    fn connect(&self, peer: u32) -> Result<()> {
        let sh = &self.0;
        let addr = sh
            .addrs
            .get(peer as usize)
            .copied()
            .flatten()
            .ok_or_else(|| HcclError::para(format!("rank {peer} has no control address")))?;
        let mut s = TcpStream::connect_timeout(&addr, sh.io_timeout).map_err(|e| {
            HcclError::from_io(
                format!("connecting the control plane to rank {peer} at {addr}"),
                e,
            )
            .peer(peer)
        })?;
        let _ = s.set_nodelay(true);
        let hello = sh.hello().encode(sh.rank);
        write_all_within(&mut s, &hello, sh.io_timeout).map_err(|e| e.peer(peer))?;
        let reader = s
            .try_clone()
            .map_err(|e| HcclError::from_io("cloning a control connection", e))?;
        *sh.out[peer as usize]
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(s);
        sh.fresh
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((peer, reader));
        let _ = (&sh.wake).write(&[1]);
        Ok(())
    }

    fn deliver(&self, from: u32, msg: Msg) {
        let h = self
            .0
            .handler
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        match h {
            Some(h) => h(self, from, msg),
            None => self
                .0
                .pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((from, msg)),
        }
    }
}

/// Writes all of `buf` to a (possibly non-blocking) socket within `limit`.
fn write_all_within(s: &mut TcpStream, mut buf: &[u8], limit: Duration) -> Result<()> {
    let end = Instant::now() + limit;
    while !buf.is_empty() {
        match s.write(buf) {
            Ok(0) => return Err(HcclError::tcp_transfer("control connection closed")),
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                let left = end.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(HcclError::tcp_transfer(format!(
                        "a control message took longer than {limit:?} to send"
                    )));
                }
                let ms = u16::try_from(left.as_millis().max(1)).unwrap_or(u16::MAX);
                let mut fds = [PollFd::new(s.as_fd(), PollFlags::POLLOUT)];
                let _ = poll(&mut fds, PollTimeout::from(ms));
            }
            Err(e) => return Err(HcclError::from_io("sending a control message", e)),
        }
    }
    Ok(())
}

/// One connection the thread reads.
struct Conn {
    /// Known once its Hello arrived (connections this rank made know it).
    rank: Option<u32>,
    stream: TcpStream,
    buf: Vec<u8>,
    said_bye: bool,
    /// A frame arrived on it. A connection this rank made that closes
    /// before the peer said anything was never accepted — the peer was
    /// stopping, and its listener's close reset it — which is no sign of
    /// the peer's death (a dead peer closes the connections it had).
    heard: bool,
}

impl Conn {
    /// A connection nothing has been read from yet (`rank`: known for
    /// connections this rank made).
    fn new(rank: Option<u32>, stream: TcpStream) -> Conn {
        Conn {
            rank,
            stream,
            buf: Vec::new(),
            said_bye: false,
            heard: false,
        }
    }
}

/// The control thread: accepts, reads, delivers.
fn run(sh: &Arc<Shared>, listener: TcpListener, mut wake_rx: UnixStream) {
    let control = Control(sh.clone());
    let mut conns: Vec<Conn> = Vec::new();
    loop {
        if sh.stop.load(Ordering::Acquire) {
            // every connection says goodbye, those a sender made just now
            // too (each peer reads the goodbye before the connection's end)
            for (peer, stream) in
                std::mem::take(&mut *sh.fresh.lock().unwrap_or_else(|p| p.into_inner()))
            {
                conns.push(Conn::new(Some(peer), stream));
            }
            // and so do connections a peer made that are still waiting to
            // be accepted: closing the listener would reset them, and the
            // peer, which reads the connections it made, would take the
            // reset for this rank's death
            while let Ok((stream, _)) = listener.accept() {
                conns.push(Conn::new(None, stream));
            }
            let bye = Msg::Bye.encode(sh.rank);
            for c in &mut conns {
                let _ = write_all_within(&mut c.stream, &bye, Duration::from_millis(100));
            }
            return;
        }
        for (peer, stream) in
            std::mem::take(&mut *sh.fresh.lock().unwrap_or_else(|p| p.into_inner()))
        {
            let _ = stream.set_nonblocking(true);
            conns.push(Conn::new(Some(peer), stream));
        }
        let mut fds = vec![
            PollFd::new(wake_rx.as_fd(), PollFlags::POLLIN),
            PollFd::new(listener.as_fd(), PollFlags::POLLIN),
        ];
        fds.extend(
            conns
                .iter()
                .map(|c| PollFd::new(c.stream.as_fd(), PollFlags::POLLIN)),
        );
        if poll(&mut fds, PollTimeout::from(1000u16)).is_err() {
            continue;
        }
        let ready: Vec<bool> = fds
            .iter()
            .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
            .collect();
        drop(fds);
        // connections accepted below were not polled this round
        let polled = conns.len();
        if ready[0] {
            let mut b = [0u8; 64];
            while matches!(wake_rx.read(&mut b), Ok(n) if n > 0) {}
        }
        if ready[1] {
            while let Ok((stream, _)) = listener.accept() {
                let _ = stream.set_nonblocking(true);
                let _ = stream.set_nodelay(true);
                conns.push(Conn::new(None, stream));
            }
        }
        let mut closed = Vec::new();
        for (i, c) in conns.iter_mut().enumerate().take(polled) {
            if !ready[2 + i] {
                continue;
            }
            if !read_conn(&control, c) {
                closed.push(i);
            }
        }
        for i in closed.into_iter().rev() {
            let c = conns.swap_remove(i);
            if let (Some(r), false, true) = (c.rank, c.said_bye, c.heard) {
                let said = sh
                    .gone_by_bye
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .contains(&r);
                if !said && !sh.stop.load(Ordering::Acquire) {
                    tracing::debug!(
                        rank = sh.rank,
                        peer = r,
                        "control connection lost: the peer's process is gone"
                    );
                    let mut lost = sh.lost.lock().unwrap_or_else(|p| p.into_inner());
                    if !lost.contains(&r) {
                        lost.push(r);
                    }
                    drop(lost);
                    let hook = sh.on_lost.lock().unwrap_or_else(|p| p.into_inner()).clone();
                    if let Some(f) = hook {
                        let process = sh
                            .processes
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .get(r as usize)
                            .cloned()
                            .flatten();
                        f(r, process.as_ref());
                    }
                    // a gather waiting for the lost rank gives up
                    let _guard = sh.parts.lock().unwrap_or_else(|p| p.into_inner());
                    sh.parts_cv.notify_all();
                }
            }
            if let Some(r) = c.rank {
                // a sender must not write to a closed connection's twin
                let mut out = sh.out[r as usize].lock().unwrap_or_else(|p| p.into_inner());
                if out
                    .as_ref()
                    .and_then(|s| s.peer_addr().ok())
                    .is_none_or(|a| c.stream.peer_addr().is_ok_and(|b| a == b))
                {
                    *out = None;
                }
            }
        }
    }
}

/// Reads what `c` has; delivers whole frames. `false` once it closed (or
/// broke, or turned out a stray).
fn read_conn(control: &Control, c: &mut Conn) -> bool {
    let sh = &control.0;
    let mut chunk = [0u8; 4096];
    // the frames read before the end still count: a goodbye and the close
    // that follows it often arrive in one read
    let open = loop {
        match c.stream.read(&mut chunk) {
            Ok(0) => break false,
            Ok(n) => c.buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => break true,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => break false,
        }
    };
    loop {
        let (from, msg, used) = match Msg::decode(&c.buf) {
            Ok(Some(f)) => f,
            Ok(None) => return open,
            Err(e) => {
                tracing::warn!(rank = sh.rank, error = %e, "dropping a control connection");
                return false;
            }
        };
        c.buf.drain(..used);
        c.heard = true;
        match (c.rank, msg) {
            (
                None,
                Msg::Hello {
                    unique_id,
                    pid,
                    host,
                },
            ) => {
                if unique_id != sh.unique_id || from as usize >= sh.out.len() {
                    tracing::warn!(rank = sh.rank, from, "dropping a stray control connection");
                    return false;
                }
                c.rank = Some(from);
                sh.note_process(from, pid, host);
                // introduce this rank back (the connector learns who it is)
                let _ = write_all_within(
                    &mut c.stream,
                    &sh.hello().encode(sh.rank),
                    Duration::from_millis(100),
                );
                let mut out = sh.out[from as usize]
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                if out.is_none() {
                    *out = c.stream.try_clone().ok();
                }
            }
            (None, _) => return false,
            (Some(r), Msg::Bye) => {
                c.said_bye = true;
                let mut gone = sh.gone_by_bye.lock().unwrap_or_else(|p| p.into_inner());
                if !gone.contains(&r) {
                    gone.push(r);
                }
            }
            (Some(r), Msg::Hello { pid, host, .. }) => sh.note_process(r, pid, host),
            (Some(r), Msg::Part { tag, blob }) => {
                sh.parts
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((tag, r, blob));
                sh.parts_cv.notify_all();
            }
            (Some(r), m) => control.deliver(r, m),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_bad_ones_are_refused() {
        for m in [
            Msg::Hello {
                unique_id: [7; 16],
                pid: 4711,
                host: "node-a".into(),
            },
            Msg::Bye,
            Msg::Revoke {
                origin: 3,
                reason: "a reason".into(),
            },
        ] {
            let f = m.encode(5);
            assert_eq!(Msg::decode(&f[..f.len() - 1]).unwrap(), None);
            assert_eq!(Msg::decode(&f).unwrap(), Some((5, m, f.len())));
        }
        let long = Msg::Revoke {
            origin: 0,
            reason: "é".repeat(2000),
        };
        let (_, back, _) = Msg::decode(&long.encode(0)).unwrap().unwrap();
        let Msg::Revoke { reason, .. } = back else {
            panic!("{back:?}")
        };
        assert!(reason.len() <= MAX_REASON && reason.chars().all(|c| c == 'é'));
        assert!(Msg::decode(&[0xff, 0xff, 0xff, 0, 1]).is_err());
        assert!(Msg::decode(&[5, 0, 0, 0, 9, 0, 0, 0, 0]).is_err());
    }

    fn planes(n: u32) -> Vec<ControlPlane> {
        let listeners: Vec<_> = (0..n)
            .map(|_| ControlListener::bind([127, 0, 0, 1].into()).unwrap())
            .collect();
        let addrs: Vec<_> = listeners.iter().map(|l| Some(l.addr().unwrap())).collect();
        listeners
            .into_iter()
            .enumerate()
            .map(|(r, l)| {
                ControlPlane::start(l, r as u32, [1; 16], addrs.clone(), Duration::from_secs(5))
                    .unwrap()
            })
            .collect()
    }

    #[test]
    fn every_rank_hears_every_other_and_a_drop_is_a_goodbye() {
        let planes = planes(4);
        let (tx, rx) = std::sync::mpsc::channel();
        for (r, p) in planes.iter().enumerate() {
            let tx = Mutex::new(tx.clone());
            p.control()
                .set_handler(Arc::new(move |_: &Control, from, m| {
                    tx.lock().unwrap().send((r as u32, from, m)).unwrap();
                }));
        }
        for (r, p) in planes.iter().enumerate() {
            p.control().send_all(
                None,
                &Msg::Revoke {
                    origin: r as u32,
                    reason: "hi".into(),
                },
            );
        }
        let mut got: Vec<(u32, u32)> = (0..12)
            .map(|_| {
                let (to, from, m) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
                assert_eq!(
                    m,
                    Msg::Revoke {
                        origin: from,
                        reason: "hi".into()
                    }
                );
                (to, from)
            })
            .collect();
        got.sort();
        let want: Vec<(u32, u32)> = (0..4)
            .flat_map(|t| (0..4).filter(move |&f| f != t).map(move |f| (t, f)))
            .collect();
        assert_eq!(got, want);
        let mut planes = planes;
        drop(planes.remove(1));
        std::thread::sleep(Duration::from_millis(200));
        for p in &planes {
            assert!(p.control().lost().is_empty(), "a goodbye is not a loss");
        }
    }
}
