//! The TCP link: ranks in different processes or on different hosts.
//!
//! Each rank runs one [`TcpNode`]: a listener, the connections to its
//! peers and a progress thread. Every socket is non-blocking, and whoever
//! waits reads: the rank's driver, while it runs an op, reads its own
//! sockets each time it polls a verb that waits on a peer (as MPI
//! libraries poll from the waiting thread), so an arrival costs no thread
//! hand-off. Only when the driver is about to park does it hand the
//! sockets to the progress thread ([`ParkHook`]), which then sleeps in
//! `poll(2)` on them and wakes the driver when a frame arrived; the
//! driver takes them back when it wakes. A driver that stops driving
//! (its op completed) with gathered frames a full socket refused hands
//! the sockets over too ([`ParkHook::released`]): the progress thread
//! writes the rest as room appears, since the op's verbs are done and
//! nothing else of this rank would. The progress thread also accepts
//! connections and reads their introductions without blocking anyone
//! ([`lobby`]).
//!
//! A frame is a 32-byte header and a payload ([`wire`]); a transfer is read
//! straight into its target buffer and sent straight from its source (one
//! `sendmsg` with the header), so no copy is made on either side beyond
//! the kernel's. A link may stripe large transfers over several sockets
//! (`HCCL_RS_SOCKETS_PER_LINK`, chosen by the connecting rank).
//!
//! Connections: the lower rank of a pair connects to the higher rank's
//! listener and introduces each socket with the group's unique id; strays
//! (wrong id, garbage, silence past a deadline) are dropped with a log
//! line. Each end's first frame then says its process id, for messages.
//!
//! A peer that dies: its kernel closes the socket, so the next read finds
//! end-of-file (or a reset) and marks the connection lost (a peer that
//! destroys its communicator says goodbye first, which is not a loss). A
//! peer whose host vanishes sends nothing more; TCP keep-alive probes
//! ([`KEEPALIVE_IDLE`], no cost while data flows) find it in a few seconds.
//! Either way, waits on the link end with an error naming the lost rank,
//! its process and host.

mod component;
mod conn;
mod lobby;
mod progress;
#[cfg(test)]
mod tests;
mod wire;

pub use component::{decode_tcp_address, encode_tcp_address, TcpTransport, TCP_SCORE};

use super::consistency::DeferredChecks;
use super::TCP_LINK;
use super::{FlushRequest, Link, LinkOp, LinkOpState, OpDesc, ParkHook};
use crate::error::{HcclError, Result};
use crate::mem::{DeviceMem, MemKind};
use crate::sync::EventCount;
use crate::sync::{Arc, AtomicBool, AtomicU64, Condvar, Mutex, Ordering, RwLock};
use conn::{AckRule, Conn, Payload};
use std::collections::HashMap;
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::task::Poll;
use std::time::{Duration, Instant};
use wire::{kind_code, Frame, Header, Hello};

/// Seconds of silence on a connection before the kernel starts probing
/// the peer's host, the seconds between probes, and the unanswered probes
/// that break the connection: a vanished host is noticed in about
/// `KEEPALIVE_IDLE + KEEPALIVE_INTERVAL * KEEPALIVE_COUNT` seconds. Probes
/// are sent by the kernel only on idle connections, so they cost nothing
/// while data flows.
pub const KEEPALIVE_IDLE: u32 = 1;
const KEEPALIVE_INTERVAL: u32 = 1;
const KEEPALIVE_COUNT: u32 = 2;
/// Default [`TcpOptions::link_timeout`]: long enough that a link shaped
/// to 100 Mbit/s with a full queue (about 1 MiB per socket, 84 ms) never
/// trips it, short enough that a dropped link is named within a second
/// and before the control plane's keep-alive (about 3 s of silence)
/// takes the peer for lost.
pub const DEFAULT_LINK_TIMEOUT: Duration = Duration::from_millis(1000);
/// Most sockets a link may stripe over (`HCCL_RS_SOCKETS_PER_LINK`).
pub const MAX_SOCKETS: usize = 16;
/// While a verb waits on one peer, the driver reads that peer's sockets
/// at every poll and every other peer's at least this often, so that a
/// peer blocked sending to this rank is never stuck behind it.
const SWEEP_EVERY: Duration = Duration::from_micros(50);

/// How a [`TcpNode`] runs its links.
#[derive(Clone, Copy, Debug)]
pub struct TcpOptions {
    /// Longest a connection's introduction and first frame may take to
    /// write.
    pub io_timeout: Duration,
    /// Sockets per link this rank opens to higher ranks (a link's
    /// transfers of [`TcpOptions::STRIPE_MIN`] bytes or more are striped
    /// over them); links from lower ranks use what those chose.
    pub sockets_per_link: usize,
    /// Longest data sent on a link may stay unacknowledged before the
    /// link counts as dropped (`TCP_USER_TIMEOUT`,
    /// `HCCL_RS_TCP_LINK_TIMEOUT_MS`); `None`: the kernel's default
    /// (retransmissions for many minutes). A flap shorter than this is
    /// absorbed by TCP (the op finishes late); a longer one fails the
    /// link's waits with an error naming the link, which op retry
    /// (`HCCL_OP_RETRY_ENABLE`) can recover from.
    pub link_timeout: Option<Duration>,
}

impl TcpOptions {
    /// Transfers at least this large are striped over a link's sockets.
    pub const STRIPE_MIN: usize = conn::STRIPE_MIN;
}

impl Default for TcpOptions {
    fn default() -> Self {
        TcpOptions {
            io_timeout: Duration::from_secs(30),
            sockets_per_link: 1,
            link_timeout: Some(DEFAULT_LINK_TIMEOUT),
        }
    }
}

#[derive(Debug)]
struct Shared {
    rank: u32,
    unique_id: [u8; 16],
    options: TcpOptions,
    mems: Mutex<[Option<DeviceMem>; 5]>,
    waker: Arc<EventCount>,
    conns: Mutex<HashMap<u32, Arc<Conn>>>,
    /// The live connections, read on every sweep without building a list.
    list: RwLock<Arc<Vec<Arc<Conn>>>>,
    arrived: Condvar,
    stop: AtomicBool,
    /// Set while the driver sleeps: the progress thread reads the sockets.
    thread_reads: AtomicBool,
    /// When the driver last read every connection (ns since `epoch`).
    last_sweep: AtomicU64,
    epoch: Instant,
    /// Writing a byte wakes the progress thread's poll.
    wake_tx: Mutex<Option<OwnedFd>>,
    /// Some connection has gathered frames to write.
    dirty: AtomicBool,
    /// The device's request to be flushed after its round (set once, when
    /// the node is attached to its device).
    flush_request: crate::sync::OnceLock<FlushRequest>,
}

impl Shared {
    fn live(&self) -> Arc<Vec<Arc<Conn>>> {
        self.list.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn relist(&self, conns: &HashMap<u32, Arc<Conn>>) {
        *self.list.write().unwrap_or_else(|p| p.into_inner()) =
            Arc::new(conns.values().cloned().collect());
    }

    fn wake_progress(&self) {
        if let Some(fd) = self
            .wake_tx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            let _ = rustix::io::write(fd, &[1u8]);
        }
    }

    /// Reads `conn`; a broken connection is failed (its waits then end
    /// with the reason). `true` if a frame was applied.
    fn pump(&self, conn: &Conn) -> bool {
        match conn.pump(&self.mems) {
            Ok(p) => p,
            Err(e) => {
                self.fail_conn(conn, &e);
                true
            }
        }
    }

    /// A connection gathered a frame: write it when the round ends (or
    /// before anything waits, whichever is first).
    fn gathered(&self) {
        if !self.dirty.swap(true, Ordering::AcqRel) {
            if let Some(r) = self.flush_request.get() {
                r.raise();
            }
        }
    }

    /// Writes every connection's gathered frames (those a full socket
    /// refuses stay, and the node stays dirty).
    fn flush_all(&self) {
        if !self.dirty.swap(false, Ordering::AcqRel) {
            return;
        }
        for c in self.live().iter() {
            match c.flush() {
                Ok(true) => {}
                Ok(false) => self.dirty.store(true, Ordering::Release),
                Err(e) => self.fail_conn(c, &e),
            }
        }
    }

    /// The driver's turn while a verb on `conn` waits: write what is
    /// gathered (the peer may wait for it), then read `conn`, and every
    /// connection if the last such sweep is [`SWEEP_EVERY`] old.
    fn driver_pump(&self, conn: &Conn) {
        if self.thread_reads.load(Ordering::Relaxed) {
            // the driver is awake and polling: it reads from now on
            self.thread_reads.store(false, Ordering::Relaxed);
        }
        self.flush_all();
        self.pump(conn);
        let now = self.epoch.elapsed().as_nanos() as u64;
        let last = self.last_sweep.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= SWEEP_EVERY.as_nanos() as u64 {
            self.last_sweep.store(now, Ordering::Relaxed);
            for c in self.live().iter() {
                if !std::ptr::eq(c.as_ref(), conn) {
                    self.pump(c);
                }
            }
        }
    }

    /// Marks `conn` broken by `e`: its waits fail with the reason (a lost
    /// peer if it left without a goodbye) and nobody reads it any more.
    fn fail_conn(&self, conn: &Conn, e: &HcclError) {
        if conn.dead.swap(true, Ordering::AcqRel) {
            return;
        }
        let inbox = &conn.inbox;
        let reason = if inbox.closed.load(Ordering::Acquire) {
            tracing::debug!(rank = self.rank, peer = conn.peer, "peer closed the link");
            e.message().to_owned()
        } else if inbox.dropped.load(Ordering::Acquire) {
            let reason = format!(
                "{TCP_LINK} {} and {} dropped: {}",
                self.rank,
                inbox.describe(conn.peer),
                e.message()
            );
            tracing::warn!(rank = self.rank, peer = conn.peer, reason, "link dropped");
            reason
        } else {
            // a reset comes from a dead process's kernel, or from a live
            // peer whose end of the link timed out while the network was
            // down (its kernel then answers our retransmissions with a
            // reset): name the link, and both
            let how = if inbox.reset.load(Ordering::Acquire) {
                format!(
                    "reset {TCP_LINK} {} and rank {} ({}): its process died, or \
                     its end dropped the link while the network between the hosts was down",
                    self.rank,
                    conn.peer,
                    e.message()
                )
            } else {
                format!("closed its connection without a goodbye ({})", e.message())
            };
            let lost = inbox.lost_error(conn.peer, &how);
            tracing::warn!(rank = self.rank, peer = conn.peer, error = %lost, "link to peer lost");
            inbox.lost.store(true, Ordering::Release);
            lost.message().to_owned()
        };
        inbox.fail(&reason);
        let mut conns = self.conns.lock().unwrap_or_else(|p| p.into_inner());
        if conns
            .get(&conn.peer)
            .is_some_and(|c| std::ptr::eq(c.as_ref(), conn))
        {
            conns.remove(&conn.peer);
            self.relist(&conns);
        }
        drop(conns);
        self.waker.notify();
    }

    fn add_conn(&self, conn: Arc<Conn>) {
        let mut conns = self.conns.lock().unwrap_or_else(|p| p.into_inner());
        conns.insert(conn.peer, conn);
        self.relist(&conns);
        drop(conns);
        self.arrived.notify_all();
        self.wake_progress();
    }
}

impl ParkHook for Shared {
    fn parking(&self) {
        self.flush_all();
        if !self.thread_reads.swap(true, Ordering::AcqRel) {
            self.wake_progress();
        }
    }

    fn woke(&self) {
        self.thread_reads.store(false, Ordering::Relaxed);
    }

    fn flush(&self) {
        self.flush_all();
    }

    fn set_flush_request(&self, request: FlushRequest) {
        // one device per node: a second attachment keeps the first
        let _ = self.flush_request.set(request);
    }

    fn released(&self) {
        // the common case, every op of a TCP rank: nothing left to write
        // (a load, not flush_all's read-modify-write)
        if !self.dirty.load(Ordering::Acquire) {
            return;
        }
        // Gathered frames a full socket refused would otherwise wait for
        // this device's next op: its last verbs completed when their
        // frames were gathered, so a peer may wait for them while this
        // rank waits for that peer elsewhere. The progress thread writes
        // them as the socket takes them (and reads meanwhile; the driver
        // takes the sockets back at its next wait).
        self.flush_all();
        if self.dirty.load(Ordering::Acquire) {
            self.thread_reads.store(true, Ordering::Release);
            // also when it was reading already: its poll may not watch
            // for room on the sockets just found full
            self.wake_progress();
        }
    }
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
    /// connections present `unique_id`, with one socket per link.
    /// Incoming transfers land in the buffers registered with
    /// [`TcpNode::register_mem`]; `waker` wakes the rank's stream driver.
    pub fn start(
        rank: u32,
        unique_id: [u8; 16],
        bind: SocketAddr,
        waker: Arc<EventCount>,
        io_timeout: Duration,
    ) -> Result<TcpNode> {
        let options = TcpOptions {
            io_timeout,
            ..TcpOptions::default()
        };
        TcpNode::start_with(rank, unique_id, bind, waker, options, &[])
    }

    /// [`TcpNode::start`] with all options, and the buffers incoming
    /// transfers land in registered before any peer can connect (a peer
    /// may send before this rank's first op: see [`TcpNode::register_mem`]).
    pub fn start_with(
        rank: u32,
        unique_id: [u8; 16],
        bind: SocketAddr,
        waker: Arc<EventCount>,
        options: TcpOptions,
        mems: &[(MemKind, DeviceMem)],
    ) -> Result<TcpNode> {
        if options.sockets_per_link == 0 || options.sockets_per_link > MAX_SOCKETS {
            return Err(HcclError::para(format!(
                "sockets per link must be 1 to {MAX_SOCKETS}, not {}",
                options.sockets_per_link
            )));
        }
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
            options,
            mems: Mutex::new(std::array::from_fn(|i| {
                mems.iter()
                    .find(|(k, _)| k.index() == i)
                    .map(|(_, m)| m.clone())
            })),
            waker,
            conns: Mutex::new(HashMap::new()),
            list: RwLock::new(Arc::new(Vec::new())),
            arrived: Condvar::new(),
            stop: AtomicBool::new(false),
            thread_reads: AtomicBool::new(true),
            last_sweep: AtomicU64::new(0),
            epoch: Instant::now(),
            wake_tx: Mutex::new(Some(wake_tx)),
            dirty: AtomicBool::new(false),
            flush_request: crate::sync::OnceLock::new(),
        });
        let s2 = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("hccl-tcp{rank}"))
            .spawn(move || progress::run(s2, listener, wake_rx))
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

    /// What the rank's device must tell this node when its driver parks
    /// and wakes (see `Device::add_park_hook`): while it sleeps, the
    /// progress thread reads the sockets for it.
    pub fn park_hook(&self) -> Arc<dyn ParkHook> {
        self.shared.clone()
    }

    /// Registers local buffer `kind`: incoming transfers to `kind` land in
    /// it. A transfer a peer sends before the buffer is registered breaks
    /// the link, so buffers peers may write before this rank's first op
    /// belong in [`TcpNode::start_with`].
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
        if peer == sh.rank {
            return Err(HcclError::para(format!(
                "rank {peer} cannot have a TCP link to itself"
            )));
        }
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
            node: sh.clone(),
            remote_lens,
            signals_taken: AtomicU64::new(0),
            dones_taken: AtomicU64::new(0),
            checks: DeferredChecks::default(),
        })
    }

    fn connect(&self, peer: u32, addr: SocketAddr, timeout: Duration) -> Result<Arc<Conn>> {
        let sh = &self.shared;
        let deadline = Instant::now() + timeout;
        let count = sh.options.sockets_per_link;
        let mut socks = Vec::with_capacity(count);
        for index in 0..count {
            let mut s = connect_retrying(sh.rank, peer, addr, deadline, timeout)?;
            let hello = Hello {
                unique_id: sh.unique_id,
                from: sh.rank,
                to: peer,
                index: index as u16,
                count: count as u16,
            };
            s.set_write_timeout(Some(sh.options.io_timeout)).ok();
            s.write_all(&hello.encode()).map_err(|e| {
                HcclError::tcp_connect(format!("introducing to rank {peer}: {e}"))
                    .rank(sh.rank)
                    .peer(peer)
            })?;
            socks.push(s);
        }
        let conn = new_conn(peer, socks, &sh.options)?;
        sh.add_conn(conn.clone());
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
        for c in self.shared.live().iter() {
            let _ = c.send_now(
                Header::new(Frame::Bye, 0),
                Vec::new(),
                Duration::from_millis(100),
            );
        }
        self.shared.stop.store(true, Ordering::Release);
        self.shared.wake_progress();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn connect_retrying(
    rank: u32,
    peer: u32,
    addr: SocketAddr,
    deadline: Instant,
    timeout: Duration,
) -> Result<TcpStream> {
    let mut backoff = Duration::from_millis(5);
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(2).min(timeout)) {
            Ok(s) => return Ok(s),
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
                .rank(rank)
                .peer(peer))
            }
        }
    }
}

/// Sets up the introduced sockets of a link to `peer` (no delay, keep-alive,
/// this process's id as the first frame on socket 0, then non-blocking).
fn new_conn(peer: u32, mut socks: Vec<TcpStream>, options: &TcpOptions) -> Result<Arc<Conn>> {
    let io = |e| HcclError::from_io("configuring a link socket", e);
    for s in socks.iter_mut() {
        s.set_nonblocking(false).map_err(io)?;
        s.set_nodelay(true).map_err(io)?;
        s.set_write_timeout(Some(options.io_timeout)).map_err(io)?;
        keep_alive(s);
        if let Some(t) = options.link_timeout {
            user_timeout(s, t);
        }
    }
    let ident = Header {
        off: u64::from(crate::mem::cma::own_pid()),
        ..Header::new(Frame::Ident, 0)
    };
    socks[0].write_all(&ident.encode()).map_err(|e| {
        HcclError::tcp_connect(format!("introducing this process to rank {peer}: {e}")).peer(peer)
    })?;
    for s in &socks {
        s.set_nonblocking(true).map_err(io)?;
    }
    Ok(Arc::new(Conn::new(peer, socks, options.link_timeout)))
}

/// Sets `TCP_USER_TIMEOUT`: data unacknowledged for `t` breaks the
/// connection with `ETIMEDOUT` (see [`TcpOptions::link_timeout`]).
fn user_timeout(stream: &TcpStream, t: Duration) {
    use nix::sys::socket::{setsockopt, sockopt};
    let ms = u32::try_from(t.as_millis()).unwrap_or(u32::MAX).max(1);
    if let Err(e) = setsockopt(stream, sockopt::TcpUserTimeout, &ms) {
        tracing::debug!(error = %e, "TCP_USER_TIMEOUT not set on a link socket");
    }
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

/// One end of a TCP link.
#[derive(Debug)]
pub struct TcpLink {
    local: u32,
    conn: Arc<Conn>,
    node: Arc<Shared>,
    remote_lens: [Option<usize>; 5],
    signals_taken: AtomicU64,
    dones_taken: AtomicU64,
    /// The consistency check, deferred to the link's next wait.
    checks: DeferredChecks,
}

impl TcpLink {
    /// Names the peer's host in messages (e.g. the host id the bootstrap
    /// exchanged and the link address). The peer's process id comes with
    /// its first frame.
    pub fn with_peer_host(self, host: impl Into<String>) -> TcpLink {
        if let Ok(mut h) = self.conn.inbox.host.lock() {
            *h = host.into();
        }
        self
    }

    /// Sends a frame for a verb, reading while it cannot (the peer may be
    /// blocked sending to this rank).
    fn send(
        &self,
        state: &mut LinkOpState,
        header: Header,
        payload: Payload<'_>,
        ack: AckRule,
    ) -> Poll<Result<()>> {
        if let Err(e) = self.health() {
            return Poll::Ready(Err(e));
        }
        match self.conn.send(&mut state.seq, header, payload, ack) {
            Poll::Ready(Ok(gathered)) => {
                if gathered {
                    self.node.gathered();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e.rank(self.local))),
            Poll::Pending => {
                self.node.driver_pump(&self.conn);
                Poll::Pending
            }
        }
    }

    /// Sends `src` into the peer's `kind` buffer at `off` under `ack`.
    fn send_data(
        &self,
        state: &mut LinkOpState,
        kind: MemKind,
        off: usize,
        src: &crate::mem::PinnedMem,
        ack: AckRule,
    ) -> Poll<Result<()>> {
        let m = src.mem();
        // SAFETY: `m` is a pinned live range, pinned until this verb
        // completes (the connection keeps no pointer to it past that);
        // the bytes are only read, and the algorithm does not modify a
        // buffer it is sending.
        let bytes = unsafe { std::slice::from_raw_parts(m.ptr(), m.len()) };
        let header = Header {
            kind: kind_code(kind),
            off: off as u64,
            ..Header::new(Frame::Data, bytes.len())
        };
        self.send(state, header, Payload::Borrowed(bytes), ack)
    }

    /// Waits until `counter` reaches this verb's sequence number (drawn
    /// from `next` at its first poll), reading meanwhile.
    fn take(
        &self,
        counter: &AtomicU64,
        next: impl FnOnce() -> u64,
        state: &mut LinkOpState,
    ) -> Poll<Result<()>> {
        let seq = *state.seq.get_or_insert_with(next);
        if counter.load(Ordering::Acquire) < seq {
            self.node.driver_pump(&self.conn);
        }
        if let Err(e) = self.check_deferred() {
            return Poll::Ready(Err(e));
        }
        if counter.load(Ordering::Acquire) >= seq {
            return Poll::Ready(Ok(()));
        }
        if let Err(e) = self.health() {
            return Poll::Ready(Err(e));
        }
        Poll::Pending
    }

    fn next_of(counter: &AtomicU64) -> impl FnOnce() -> u64 + '_ {
        || counter.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Checks the deferred descriptors whose peer's descriptor has come.
    fn check_deferred(&self) -> Result<()> {
        let inbox = &self.conn.inbox;
        self.checks.check(
            &inbox.desc_count,
            &inbox.descs,
            (self.local, self.conn.peer),
        )
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
    fn eager_max(&self) -> usize {
        conn::EAGER_MAX
    }
    fn remote_mem_len(&self, kind: MemKind) -> Option<usize> {
        self.remote_lens[kind.index()]
    }
    fn poll(&self, op: &LinkOp, state: &mut LinkOpState) -> Poll<Result<()>> {
        let inbox = &self.conn.inbox;
        match op {
            LinkOp::TxAck => {
                // the landing area is free from here on: transfers that
                // came early for this ack go into place (once per verb)
                if state.progress == 0 {
                    state.progress = 1;
                    self.conn.issue_ack();
                }
                let none = Payload::Owned(Vec::new());
                self.send(state, Header::new(Frame::Ack, 0), none, AckRule::None)
            }
            LinkOp::TxDataSignal => {
                let none = Payload::Owned(Vec::new());
                self.send(state, Header::new(Frame::Signal, 0), none, AckRule::None)
            }
            LinkOp::RxAck => self.take(&inbox.acks, || self.conn.take_ack(), state),
            LinkOp::RxDataSignal => {
                self.take(&inbox.signals, Self::next_of(&self.signals_taken), state)
            }
            LinkOp::RxWaitDone => self.take(&inbox.dones, Self::next_of(&self.dones_taken), state),
            LinkOp::TxAsync {
                dst_kind,
                dst_offset,
                src,
            } => self.send_data(state, *dst_kind, *dst_offset, src, AckRule::None),
            LinkOp::TxAfterAck {
                dst_kind,
                dst_offset,
                src,
            } => {
                let rule = AckRule::Take {
                    received: inbox.acks.load(Ordering::Acquire),
                    eager: true,
                };
                self.send_data(state, *dst_kind, *dst_offset, src, rule)
            }
            LinkOp::TxWithReduce { .. } => Poll::Ready(Err(HcclError::not_support(
                "the TCP link cannot reduce into the peer's memory; use TxAsync and reduce locally",
            ))),
            // LinkHandle::read_peer refuses links that cannot read (this one)
            LinkOp::RxParamMem => Poll::Ready(Err(HcclError::not_support(
                "the TCP link cannot read the peer's user buffers",
            ))),
            LinkOp::RxReduce { .. } => Poll::Ready(Err(HcclError::not_support(
                "the TCP link cannot read the peer's user buffers",
            ))),
            LinkOp::RxAsync { .. } if op.is_peer_read() => Poll::Ready(Err(
                HcclError::not_support("the TCP link cannot read the peer's user buffers"),
            )),
            // A transfer completes (its bytes handed to the kernel) before
            // TxAsync does; receive-side work happens on RxWaitDone's polls.
            LinkOp::RxAsync { .. } | LinkOp::TxWaitDone => Poll::Ready(Ok(())),
            LinkOp::TxDesc(d) => {
                let bytes = d.to_bytes();
                let header = Header::new(Frame::Desc, OpDesc::WIRE);
                self.send(state, header, Payload::Borrowed(&bytes), AckRule::None)
            }
            LinkOp::RxDesc(mine) => Poll::Ready(self.checks.rx_desc(
                mine,
                state,
                &inbox.desc_count,
                &inbox.descs,
                (self.local, self.conn.peer),
            )),
        }
    }

    fn abort(&self, reason: &str) {
        let msg = crate::link::relayed_failure(self.local, reason);
        let mut bytes = msg.into_bytes();
        bytes.truncate(wire::MAX_BLOB);
        let header = Header::new(Frame::Abort, bytes.len());
        if let Err(e) = self
            .conn
            .send_now(header, bytes, Duration::from_millis(100))
        {
            tracing::debug!(rank = self.local, peer = self.conn.peer, error = %e, "could not tell the peer of the abort");
        }
        self.node.waker.notify();
    }

    fn shutdown(&self, reason: &str) {
        self.conn.inbox.fail(&format!(
            "communicator aborted on rank {}: {reason}",
            self.local
        ));
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
