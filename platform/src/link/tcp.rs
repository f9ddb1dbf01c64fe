//! The TCP link: ranks in different processes or on different hosts.
//!
//! Each rank runs one [`TcpNode`]: a listener for incoming links and a
//! progress thread that blocks in `poll(2)` on every connection and applies
//! incoming frames — a transfer is read straight from the socket into the
//! target buffer (no intermediate copy), acks and signals bump counters —
//! then wakes the rank's stream driver. The thread sleeps in the kernel
//! while nothing arrives, so an idle rank burns no core.
//!
//! Sends happen on the driver: a frame is a 32-byte header, then the
//! payload, written with a bounded blocking write (the peer's progress
//! thread always drains its socket, so writes finish unless the peer is
//! gone, which the write timeout turns into an error).
//!
//! Connections: the lower rank of a pair connects to the higher rank's
//! listener and introduces itself with the group's unique id; connections
//! with a wrong id or malformed introduction are dropped with a log line.
//! Each end's first frame then says its process id, for messages.
//!
//! A peer that dies: its kernel closes the socket, so the progress thread
//! reads end-of-file (or a reset) at once and marks the connection lost
//! (a peer that destroys its communicator says goodbye first, which is not
//! a loss). A peer whose host vanishes sends nothing more; TCP keep-alive
//! probes ([`KEEPALIVE_IDLE`], no cost while data flows) find it in a few
//! seconds. Either way, waits on the link end with an error naming the
//! lost rank, its process and host.

use super::{Link, LinkOp, LinkOpState, OpDesc};
use crate::error::{HcclError, Result};
use crate::mem::{DeviceMem, MemKind};
use crate::sync::EventCount;
use crate::sync::{Arc, AtomicBool, AtomicU32, AtomicU64, Condvar, Mutex, Ordering};
use rustix::event::{poll, PollFd, PollFlags};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::task::Poll;
use std::time::{Duration, Instant};

const MAGIC: u32 = 0x4843_434c; // "HCCL"
const HELLO_LEN: usize = 4 + 16 + 4 + 4;
const HEADER_LEN: usize = 32;
/// Seconds of silence on a connection before the kernel starts probing
/// the peer's host, the seconds between probes, and the unanswered probes
/// that break the connection: a vanished host is noticed in about
/// `KEEPALIVE_IDLE + KEEPALIVE_INTERVAL * KEEPALIVE_COUNT` seconds. Probes
/// are sent by the kernel only on idle connections, so they cost nothing
/// while data flows.
pub const KEEPALIVE_IDLE: u32 = 1;
const KEEPALIVE_INTERVAL: u32 = 1;
const KEEPALIVE_COUNT: u32 = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
enum Frame {
    Ack = 1,
    Signal = 2,
    Data = 3,
    Abort = 4,
    Desc = 5,
    /// Orderly close: the peer's communicator was destroyed.
    Bye = 6,
    /// The sender's process id (in the offset field), its first frame.
    Ident = 7,
}

fn kind_code(k: MemKind) -> u32 {
    k.index() as u32
}

fn kind_from(code: u32) -> Option<MemKind> {
    MemKind::ALL.get(code as usize).copied()
}

/// Counters a peer raises on this rank, one connection each.
#[derive(Debug, Default)]
struct Inbox {
    acks: AtomicU64,
    signals: AtomicU64,
    dones: AtomicU64,
    aborted: AtomicBool,
    reason: Mutex<String>,
    descs: Mutex<std::collections::VecDeque<OpDesc>>,
    desc_count: AtomicU64,
    /// The peer said goodbye: its closing the socket is not an error to log.
    closed: AtomicBool,
    /// The connection ended without a goodbye: the peer is gone.
    lost: AtomicBool,
    /// The peer's process id (its first frame; 0 until then).
    pid: AtomicU32,
    /// The peer's host, for messages (see [`TcpLink::with_peer_host`]).
    host: Mutex<String>,
}

impl Inbox {
    /// "rank 3 (process 1234 on host node-b)", as far as known.
    fn describe(&self, peer: u32) -> String {
        let pid = self.pid.load(Ordering::Relaxed);
        let host = self.host.lock().map(|h| h.clone()).unwrap_or_default();
        super::describe_peer(peer, (pid != 0).then_some(pid), &host)
    }

    /// The error naming the lost peer `peer`, saying how it was found.
    fn lost_error(&self, peer: u32, how: &str) -> HcclError {
        let pid = self.pid.load(Ordering::Relaxed);
        let host = self.host.lock().map(|h| h.clone()).unwrap_or_default();
        super::lost_peer_error(peer, (pid != 0).then_some(pid), &host, how)
    }
}

#[derive(Debug)]
struct Conn {
    peer: u32,
    writer: Mutex<TcpStream>,
    reader: Mutex<TcpStream>,
    inbox: Inbox,
}

#[derive(Debug)]
struct Shared {
    rank: u32,
    unique_id: [u8; 16],
    mems: Mutex<[Option<DeviceMem>; 5]>,
    waker: Arc<EventCount>,
    conns: Mutex<HashMap<u32, Arc<Conn>>>,
    arrived: Condvar,
    stop: AtomicBool,
    /// Writing a byte wakes the progress thread's poll to pick up new connections.
    wake_tx: Mutex<Option<OwnedFd>>,
    io_timeout: Duration,
}

/// One rank's TCP endpoint: listener, connections, progress thread.
#[derive(Debug)]
pub struct TcpNode {
    shared: Arc<Shared>,
    addr: SocketAddr,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TcpNode {
    /// Listens on `bind` (port 0 = any) for rank `rank` of the group whose
    /// connections present `unique_id`. Incoming transfers land in the
    /// buffers registered with [`TcpNode::register_mem`]; `waker` wakes the
    /// rank's stream driver.
    pub fn start(
        rank: u32,
        unique_id: [u8; 16],
        bind: SocketAddr,
        waker: Arc<EventCount>,
        io_timeout: Duration,
    ) -> Result<TcpNode> {
        let listener = TcpListener::bind(bind).map_err(|e| {
            HcclError::tcp_connect(format!("binding the link listener to {bind}: {e}")).rank(rank)
        })?;
        let addr = listener
            .local_addr()
            .map_err(|e| HcclError::from_io("reading the listener address", e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| HcclError::from_io("configuring the listener", e))?;
        let (wake_rx, wake_tx) =
            rustix::pipe::pipe().map_err(|e| HcclError::syscall(format!("pipe: {e}")))?;
        let shared = Arc::new(Shared {
            rank,
            unique_id,
            mems: Mutex::new(Default::default()),
            waker,
            conns: Mutex::new(HashMap::new()),
            arrived: Condvar::new(),
            stop: AtomicBool::new(false),
            wake_tx: Mutex::new(Some(wake_tx)),
            io_timeout,
        });
        let s2 = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("hccl-tcp{rank}"))
            .spawn(move || progress(s2, listener, wake_rx))
            .map_err(|e| HcclError::from_io("starting the TCP progress thread", e))?;
        Ok(TcpNode {
            shared,
            addr,
            thread: Some(thread),
        })
    }

    /// The listener's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Registers local buffer `kind`: incoming transfers to `kind` land in it.
    pub fn register_mem(&self, kind: MemKind, mem: DeviceMem) {
        self.shared.mems.lock().unwrap_or_else(|p| p.into_inner())[kind.index()] = Some(mem);
    }

    /// The link to `peer`, whose listener is at `peer_addr` and whose
    /// buffers have the lengths `remote_lens` (by kind). Connects (lower
    /// rank) or waits for the peer to connect (higher rank), up to `timeout`.
    pub fn link(
        &self,
        peer: u32,
        peer_addr: SocketAddr,
        remote_lens: [Option<usize>; 5],
        timeout: Duration,
    ) -> Result<TcpLink> {
        let sh = &self.shared;
        let existing = sh
            .conns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&peer)
            .cloned();
        let conn = match existing {
            Some(c) => c,
            None if sh.rank < peer => self.connect(peer, peer_addr, timeout)?,
            None => self.await_peer(peer, timeout)?,
        };
        Ok(TcpLink {
            local: sh.rank,
            conn,
            remote_lens,
            waker: sh.waker.clone(),
            acks_taken: AtomicU64::new(0),
            signals_taken: AtomicU64::new(0),
            dones_taken: AtomicU64::new(0),
            descs_taken: AtomicU64::new(0),
        })
    }

    fn connect(&self, peer: u32, addr: SocketAddr, timeout: Duration) -> Result<Arc<Conn>> {
        let sh = &self.shared;
        let deadline = Instant::now() + timeout;
        let mut backoff = Duration::from_millis(5);
        let stream = loop {
            match TcpStream::connect_timeout(&addr, Duration::from_secs(2).min(timeout)) {
                Ok(s) => break s,
                Err(e) if Instant::now() + backoff < deadline => {
                    tracing::debug!(peer, %addr, error = %e, "link connect failed; retrying");
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_millis(500));
                }
                Err(e) => {
                    return Err(HcclError::tcp_connect(format!(
                        "could not connect to rank {peer} at {addr} within {}s (HCCL_CONNECT_TIMEOUT): {e}",
                        timeout.as_secs_f64()
                    ))
                    .rank(sh.rank)
                    .peer(peer))
                }
            }
        };
        let mut hello = Vec::with_capacity(HELLO_LEN);
        hello.extend_from_slice(&MAGIC.to_le_bytes());
        hello.extend_from_slice(&sh.unique_id);
        hello.extend_from_slice(&sh.rank.to_le_bytes());
        hello.extend_from_slice(&peer.to_le_bytes());
        let mut s = stream;
        s.set_write_timeout(Some(sh.io_timeout)).ok();
        s.write_all(&hello).map_err(|e| {
            HcclError::tcp_connect(format!("introducing to rank {peer}: {e}"))
                .rank(sh.rank)
                .peer(peer)
        })?;
        let conn = new_conn(peer, s, sh.io_timeout)?;
        add_conn(sh, conn.clone());
        Ok(conn)
    }

    fn await_peer(&self, peer: u32, timeout: Duration) -> Result<Arc<Conn>> {
        let sh = &self.shared;
        let deadline = Instant::now() + timeout;
        let mut conns = sh.conns.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(c) = conns.get(&peer) {
                return Ok(c.clone());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(HcclError::tcp_connect(format!(
                    "rank {peer} did not connect within {}s (HCCL_CONNECT_TIMEOUT)",
                    timeout.as_secs_f64()
                ))
                .rank(sh.rank)
                .peer(peer));
            }
            conns = sh
                .arrived
                .wait_timeout(conns, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

impl Drop for TcpNode {
    fn drop(&mut self) {
        // Say goodbye so peers know the close is orderly, not a crash.
        let conns: Vec<Arc<Conn>> = self
            .shared
            .conns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        for c in conns {
            let mut h = [0u8; HEADER_LEN];
            h[0..4].copy_from_slice(&MAGIC.to_le_bytes());
            h[4..8].copy_from_slice(&(Frame::Bye as u32).to_le_bytes());
            let mut w = c.writer.lock().unwrap_or_else(|p| p.into_inner());
            let _ = w.set_write_timeout(Some(Duration::from_millis(100)));
            let _ = w.write_all(&h);
        }
        self.shared.stop.store(true, Ordering::Release);
        wake_progress(&self.shared);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn new_conn(peer: u32, mut stream: TcpStream, io_timeout: Duration) -> Result<Arc<Conn>> {
    let io = |e| HcclError::from_io("configuring a link socket", e);
    stream.set_nodelay(true).map_err(io)?;
    stream.set_write_timeout(Some(io_timeout)).map_err(io)?;
    stream.set_read_timeout(Some(io_timeout)).map_err(io)?;
    keep_alive(&stream);
    // first frame: who we are, for the peer's messages should we vanish
    let mut h = [0u8; HEADER_LEN];
    h[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    h[4..8].copy_from_slice(&(Frame::Ident as u32).to_le_bytes());
    h[16..24].copy_from_slice(&u64::from(crate::mem::cma::own_pid()).to_le_bytes());
    stream.write_all(&h).map_err(|e| {
        HcclError::tcp_connect(format!("introducing this process to rank {peer}: {e}")).peer(peer)
    })?;
    let reader = stream.try_clone().map_err(io)?;
    Ok(Arc::new(Conn {
        peer,
        writer: Mutex::new(stream),
        reader: Mutex::new(reader),
        inbox: Inbox::default(),
    }))
}

/// Turns on TCP keep-alive with short intervals (see [`KEEPALIVE_IDLE`]);
/// a socket that refuses keeps working without it.
fn keep_alive(stream: &TcpStream) {
    use nix::sys::socket::{setsockopt, sockopt};
    let r = setsockopt(stream, sockopt::KeepAlive, &true)
        .and_then(|_| setsockopt(stream, sockopt::TcpKeepIdle, &KEEPALIVE_IDLE))
        .and_then(|_| setsockopt(stream, sockopt::TcpKeepInterval, &KEEPALIVE_INTERVAL))
        .and_then(|_| setsockopt(stream, sockopt::TcpKeepCount, &KEEPALIVE_COUNT));
    if let Err(e) = r {
        tracing::debug!(error = %e, "TCP keep-alive not set on a link socket");
    }
}

fn add_conn(sh: &Shared, conn: Arc<Conn>) {
    sh.conns
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(conn.peer, conn);
    sh.arrived.notify_all();
    wake_progress(sh);
}

fn wake_progress(sh: &Shared) {
    if let Some(fd) = sh
        .wake_tx
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
    {
        let _ = rustix::io::write(fd, &[1u8]);
    }
}

/// The progress thread: accepts connections and applies incoming frames.
fn progress(sh: Arc<Shared>, listener: TcpListener, wake_rx: OwnedFd) {
    loop {
        if sh.stop.load(Ordering::Acquire) {
            return;
        }
        let conns: Vec<Arc<Conn>> = sh
            .conns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        let readers: Vec<_> = conns
            .iter()
            .map(|c| {
                c.reader
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .try_clone()
            })
            .collect();
        let mut fds = vec![
            PollFd::new(&wake_rx, PollFlags::IN),
            PollFd::new(&listener, PollFlags::IN),
        ];
        let live: Vec<(usize, TcpStream)> = readers
            .into_iter()
            .enumerate()
            .filter_map(|(i, r)| r.ok().map(|r| (i, r)))
            .collect();
        for (_, r) in &live {
            fds.push(PollFd::new(r, PollFlags::IN));
        }
        let timeout = rustix::event::Timespec {
            tv_sec: 1,
            tv_nsec: 0,
        };
        if poll(&mut fds, Some(&timeout)).is_err() {
            continue;
        }
        let ready: Vec<bool> = fds.iter().map(|f| !f.revents().is_empty()).collect();
        drop(fds);
        if ready[0] {
            let mut buf = [0u8; 64];
            let _ = rustix::io::read(&wake_rx, &mut buf);
        }
        if ready[1] {
            accept_all(&sh, &listener);
        }
        for (slot, (i, _)) in live.iter().enumerate() {
            if ready[2 + slot] {
                let conn = &conns[*i];
                if let Err(e) = read_frame(&sh, conn) {
                    let inbox = &conn.inbox;
                    let reason = if inbox.closed.load(Ordering::Acquire) {
                        tracing::debug!(rank = sh.rank, peer = conn.peer, "peer closed the link");
                        e.message().to_owned()
                    } else {
                        // no goodbye: the peer's process or host is gone
                        let lost = inbox.lost_error(
                            conn.peer,
                            &format!("closed its connection without a goodbye ({})", e.message()),
                        );
                        tracing::warn!(rank = sh.rank, peer = conn.peer, error = %lost, "link to peer lost");
                        inbox.lost.store(true, Ordering::Release);
                        lost.message().to_owned()
                    };
                    fail_conn(&sh, conn, &reason);
                }
            }
        }
    }
}

fn fail_conn(sh: &Shared, conn: &Conn, reason: &str) {
    if let Ok(mut r) = conn.inbox.reason.lock() {
        if r.is_empty() {
            *r = reason.to_owned();
        }
    }
    conn.inbox.aborted.store(true, Ordering::Release);
    sh.conns
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&conn.peer);
    sh.waker.notify();
}

fn accept_all(sh: &Shared, listener: &TcpListener) {
    loop {
        let (mut s, from) = match listener.accept() {
            Ok(x) => x,
            Err(_) => return,
        };
        let _ = s.set_nonblocking(false);
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let mut hello = [0u8; HELLO_LEN];
        if let Err(e) = s.read_exact(&mut hello) {
            tracing::warn!(rank = sh.rank, %from, error = %e, "dropped a link connection that sent no introduction");
            continue;
        }
        let magic = u32::from_le_bytes(hello[0..4].try_into().expect("4 bytes"));
        let uid = &hello[4..20];
        let peer = u32::from_le_bytes(hello[20..24].try_into().expect("4 bytes"));
        let to = u32::from_le_bytes(hello[24..28].try_into().expect("4 bytes"));
        if magic != MAGIC || uid != sh.unique_id || to != sh.rank || peer >= sh.rank {
            tracing::warn!(
                rank = sh.rank,
                %from,
                "dropped a link connection with a wrong magic, unique id or rank pair"
            );
            continue;
        }
        match new_conn(peer, s, sh.io_timeout) {
            Ok(c) => add_conn(sh, c),
            Err(e) => {
                tracing::warn!(rank = sh.rank, peer, error = %e, "could not set up an accepted link")
            }
        }
    }
}

fn read_frame(sh: &Shared, conn: &Conn) -> Result<()> {
    let mut r = conn.reader.lock().unwrap_or_else(|p| p.into_inner());
    let mut h = [0u8; HEADER_LEN];
    r.read_exact(&mut h).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            return HcclError::tcp_transfer("end of stream");
        }
        HcclError::tcp_transfer(format!(
            "peer rank {} closed or broke the link: {e}",
            conn.peer
        ))
    })?;
    let u32_at = |o: usize| u32::from_le_bytes(h[o..o + 4].try_into().expect("4 bytes"));
    let u64_at = |o: usize| u64::from_le_bytes(h[o..o + 8].try_into().expect("8 bytes"));
    if u32_at(0) != MAGIC {
        return Err(HcclError::tcp_transfer("malformed frame (bad magic)"));
    }
    match u32_at(4) {
        t if t == Frame::Ack as u32 => {
            conn.inbox.acks.fetch_add(1, Ordering::Release);
        }
        t if t == Frame::Signal as u32 => {
            conn.inbox.signals.fetch_add(1, Ordering::Release);
        }
        t if t == Frame::Bye as u32 => {
            conn.inbox.closed.store(true, Ordering::Release);
            return Err(HcclError::remote(format!(
                "peer {} destroyed its communicator",
                conn.inbox.describe(conn.peer)
            )));
        }
        t if t == Frame::Ident as u32 => {
            conn.inbox.pid.store(u64_at(16) as u32, Ordering::Relaxed);
        }
        t if t == Frame::Desc as u32 => {
            let mut b = [0u8; OpDesc::WIRE];
            r.read_exact(&mut b)
                .map_err(|e| HcclError::tcp_transfer(e.to_string()))?;
            conn.inbox
                .descs
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push_back(OpDesc::from_bytes(&b));
            conn.inbox.desc_count.fetch_add(1, Ordering::Release);
        }
        t if t == Frame::Abort as u32 => {
            let len = u64_at(24) as usize;
            let mut reason = vec![0u8; len.min(4096)];
            r.read_exact(&mut reason)
                .map_err(|e| HcclError::tcp_transfer(e.to_string()))?;
            if let Ok(mut g) = conn.inbox.reason.lock() {
                if g.is_empty() {
                    *g = String::from_utf8_lossy(&reason).into_owned();
                }
            }
            conn.inbox.aborted.store(true, Ordering::Release);
        }
        t if t == Frame::Data as u32 => {
            let kind = kind_from(u32_at(8))
                .ok_or_else(|| HcclError::tcp_transfer("malformed frame (memory kind)"))?;
            let (off, len) = (u64_at(16) as usize, u64_at(24) as usize);
            let target = sh.mems.lock().unwrap_or_else(|p| p.into_inner())[kind.index()]
                .as_ref()
                .ok_or_else(|| {
                    HcclError::tcp_transfer(format!("peer wrote to unregistered {kind} buffer"))
                })?
                .range(off, len)?;
            // SAFETY: `target` lies inside a live region (checked by
            // `range`); the peer writes only after this rank acked the range
            // free, so no task reads or writes these bytes meanwhile.
            let dst = unsafe { std::slice::from_raw_parts_mut(target.ptr(), len) };
            r.read_exact(dst).map_err(|e| {
                HcclError::tcp_transfer(format!(
                    "receiving {len} bytes from rank {}: {e}",
                    conn.peer
                ))
            })?;
            conn.inbox.dones.fetch_add(1, Ordering::Release);
        }
        t => {
            return Err(HcclError::tcp_transfer(format!(
                "malformed frame (type {t})"
            )))
        }
    }
    drop(r);
    sh.waker.notify();
    Ok(())
}

/// One end of a TCP link.
#[derive(Debug)]
pub struct TcpLink {
    local: u32,
    conn: Arc<Conn>,
    remote_lens: [Option<usize>; 5],
    waker: Arc<EventCount>,
    acks_taken: AtomicU64,
    signals_taken: AtomicU64,
    dones_taken: AtomicU64,
    descs_taken: AtomicU64,
}

impl TcpLink {
    fn send(&self, frame: Frame, kind: u32, off: u64, payload: &[u8]) -> Result<()> {
        let mut h = [0u8; HEADER_LEN];
        h[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        h[4..8].copy_from_slice(&(frame as u32).to_le_bytes());
        h[8..12].copy_from_slice(&kind.to_le_bytes());
        h[16..24].copy_from_slice(&off.to_le_bytes());
        h[24..32].copy_from_slice(&(payload.len() as u64).to_le_bytes());
        let mut w = self.conn.writer.lock().unwrap_or_else(|p| p.into_inner());
        w.write_all(&h)
            .and_then(|_| w.write_all(payload))
            .map_err(|e| {
                use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset};
                if matches!(e.kind(), BrokenPipe | ConnectionReset | ConnectionAborted)
                    || self.conn.inbox.lost.load(Ordering::Acquire)
                {
                    let inbox = &self.conn.inbox;
                    inbox.lost.store(true, Ordering::Release);
                    return inbox
                        .lost_error(
                            self.conn.peer,
                            &format!("broke its connection (sending to it failed: {e})"),
                        )
                        .rank(self.local);
                }
                HcclError::tcp_transfer(format!("sending to rank {}: {e}", self.conn.peer))
                    .rank(self.local)
                    .peer(self.conn.peer)
            })
    }

    /// Names the peer's host in messages (e.g. the host id the bootstrap
    /// exchanged and the link address). The peer's process id comes with
    /// its first frame.
    pub fn with_peer_host(self, host: impl Into<String>) -> TcpLink {
        if let Ok(mut h) = self.conn.inbox.host.lock() {
            *h = host.into();
        }
        self
    }

    fn take(
        &self,
        counter: &AtomicU64,
        taken: &AtomicU64,
        state: &mut LinkOpState,
    ) -> Poll<Result<()>> {
        let seq = *state
            .seq
            .get_or_insert_with(|| taken.fetch_add(1, Ordering::Relaxed) + 1);
        if counter.load(Ordering::Acquire) >= seq {
            return Poll::Ready(Ok(()));
        }
        if let Err(e) = self.health() {
            return Poll::Ready(Err(e));
        }
        Poll::Pending
    }
}

impl Link for TcpLink {
    fn local_rank(&self) -> u32 {
        self.local
    }
    fn remote_rank(&self) -> u32 {
        self.conn.peer
    }
    fn transport(&self) -> &'static str {
        "tcp"
    }
    fn remote_mem_len(&self, kind: MemKind) -> Option<usize> {
        self.remote_lens[kind.index()]
    }
    fn poll(&self, op: &LinkOp, state: &mut LinkOpState) -> Poll<Result<()>> {
        let inbox = &self.conn.inbox;
        match op {
            LinkOp::TxAck => Poll::Ready(self.send(Frame::Ack, 0, 0, &[])),
            LinkOp::TxDataSignal => Poll::Ready(self.send(Frame::Signal, 0, 0, &[])),
            LinkOp::RxAck => self.take(&inbox.acks, &self.acks_taken, state),
            LinkOp::RxDataSignal => self.take(&inbox.signals, &self.signals_taken, state),
            LinkOp::RxWaitDone => self.take(&inbox.dones, &self.dones_taken, state),
            LinkOp::TxAsync {
                dst_kind,
                dst_offset,
                src,
            } => {
                let m = src.mem();
                // SAFETY: `m` is a pinned live range; the bytes are only read,
                // and the algorithm does not modify a buffer it is sending.
                let bytes = unsafe { std::slice::from_raw_parts(m.ptr(), m.len()) };
                Poll::Ready(self.send(Frame::Data, kind_code(*dst_kind), *dst_offset as u64, bytes))
            }
            LinkOp::TxWithReduce { .. } => Poll::Ready(Err(HcclError::not_support(
                "the TCP link cannot reduce into the peer's memory; use TxAsync and reduce locally",
            ))),
            // LinkHandle::read_peer refuses links that cannot read (this one)
            LinkOp::RxParamMem => Poll::Ready(Err(HcclError::not_support(
                "the TCP link cannot read the peer's user buffers",
            ))),
            LinkOp::RxAsync { .. } if op.is_peer_read() => Poll::Ready(Err(
                HcclError::not_support("the TCP link cannot read the peer's user buffers"),
            )),
            // Writes complete before TxAsync returns; receive-side work is
            // done by the progress thread.
            LinkOp::RxAsync { .. } | LinkOp::TxWaitDone => Poll::Ready(Ok(())),
            LinkOp::TxDesc(d) => Poll::Ready(self.send(Frame::Desc, 0, 0, &d.to_bytes())),
            LinkOp::RxDesc(mine) => match self.take(&inbox.desc_count, &self.descs_taken, state) {
                Poll::Ready(Ok(())) => {
                    let theirs = inbox
                        .descs
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .pop_front();
                    Poll::Ready(match theirs {
                        Some(t) => mine
                            .check(&t, self.conn.peer)
                            .map_err(|e| e.rank(self.local)),
                        None => Err(HcclError::internal("descriptor signalled but missing")),
                    })
                }
                other => other,
            },
        }
    }
    fn abort(&self, reason: &str) {
        let msg = format!("peer rank {} failed: {reason}", self.local);
        let bytes = msg.as_bytes();
        let _ = self.send(Frame::Abort, 0, 0, &bytes[..bytes.len().min(4096)]);
        self.waker.notify();
    }

    fn shutdown(&self, reason: &str) {
        if let Ok(mut r) = self.conn.inbox.reason.lock() {
            if r.is_empty() {
                *r = format!("communicator aborted on rank {}: {reason}", self.local);
            }
        }
        self.conn.inbox.aborted.store(true, Ordering::Release);
        self.abort(reason);
    }

    fn peer_lost(&self) -> Option<HcclError> {
        let inbox = &self.conn.inbox;
        if !inbox.lost.load(Ordering::Acquire) {
            return None;
        }
        let reason = inbox.reason.lock().map(|r| r.clone()).unwrap_or_default();
        Some(
            HcclError::remote(reason)
                .rank(self.local)
                .peer(self.conn.peer),
        )
    }

    fn health(&self) -> Result<()> {
        if self.conn.inbox.aborted.load(Ordering::Acquire) {
            let reason = self
                .conn
                .inbox
                .reason
                .lock()
                .map(|r| r.clone())
                .unwrap_or_default();
            return Err(HcclError::remote(reason)
                .rank(self.local)
                .peer(self.conn.peer));
        }
        Ok(())
    }
}
