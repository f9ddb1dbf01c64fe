//! One rank's RDMA endpoint: its device, its registrations, its
//! connections, the completion queue they share, and a thread that
//! accepts handshakes, watches the peers' sockets and, while the rank's
//! driver sleeps, drains completions and wakes it.
//!
//! Whoever waits polls: the driver drains the completion queue itself
//! each time a verb on an ibverbs link is polled (no hand-off on the
//! path of an op in flight). Only when it is about to park does it arm
//! the queue's completion channel and let the thread take over
//! ([`ParkHook`]), as the TCP link hands over its sockets.

use super::conn::{Conn, Pending};
use super::mr::MrCache;
use super::verbs::{Completion, DeviceCtx};
use super::wire::Hello;
use crate::error::{HcclError, Result};
use crate::link::ParkHook;
use crate::mem::DeviceMem;
use crate::sync::{AtomicBool, EventCount, Ordering};
use rustix::event::{poll, PollFd, PollFlags};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

/// What the device needs of a rank, fixed at open.
#[derive(Debug, Clone)]
pub(crate) struct NodeConfig {
    pub rank: u32,
    pub unique_id: [u8; 16],
    pub ccl: (DeviceMem, DeviceMem),
    /// ACK timeout exponent and retries of the queue pairs.
    pub ib_timeout: u8,
    pub retry_cnt: u8,
}

/// The device in use and the CCL buffers' registrations.
#[derive(Debug)]
pub(crate) struct Active {
    // the registrations go before the device (field order)
    ccl_mrs: [super::verbs::Mr; 2],
    pub dev: Arc<DeviceCtx>,
}

/// One rank's RDMA endpoint.
#[derive(Debug)]
pub(crate) struct Node {
    pub cfg: NodeConfig,
    pub waker: Arc<EventCount>,
    pub active: OnceLock<Active>,
    pub mrs: Mutex<MrCache>,
    pub conns: Mutex<HashMap<u32, Arc<Conn>>>,
    by_qpn: RwLock<HashMap<u32, Arc<Conn>>>,
    arrived: Condvar,
    /// Held while draining the completion queue.
    drain: Mutex<Vec<Completion>>,
    /// Set while the driver sleeps: the thread drains completions.
    thread_drains: AtomicBool,
    stop: AtomicBool,
    wake_tx: Mutex<Option<OwnedFd>>,
    pub addr: SocketAddr,
    /// Every peer's host, for messages (set when the rank is prepared).
    pub hosts: Mutex<HashMap<u32, String>>,
}

impl Node {
    /// A node listening for handshakes on `bind`.
    pub fn start(
        cfg: NodeConfig,
        waker: Arc<EventCount>,
        bind: SocketAddr,
    ) -> Result<(Arc<Node>, std::thread::JoinHandle<()>)> {
        let listener = TcpListener::bind(bind).map_err(|e| {
            HcclError::roce_connect(format!(
                "binding the ibverbs handshake listener to {bind}: {e}"
            ))
            .rank(cfg.rank)
        })?;
        let addr = listener
            .local_addr()
            .map_err(|e| HcclError::from_io("reading the listener address", e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| HcclError::from_io("configuring the listener", e))?;
        let (wake_rx, wake_tx) =
            rustix::pipe::pipe().map_err(|e| HcclError::syscall(format!("pipe: {e}")))?;
        let node = Arc::new(Node {
            cfg,
            waker,
            active: OnceLock::new(),
            mrs: Mutex::new(MrCache::default()),
            conns: Mutex::new(HashMap::new()),
            by_qpn: RwLock::new(HashMap::new()),
            arrived: Condvar::new(),
            drain: Mutex::new(Vec::with_capacity(16)),
            thread_drains: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            wake_tx: Mutex::new(Some(wake_tx)),
            addr,
            hosts: Mutex::new(HashMap::new()),
        });
        let n2 = node.clone();
        let thread = std::thread::Builder::new()
            .name(format!("hccl-ibv{}", node.cfg.rank))
            .spawn(move || n2.run(listener, wake_rx))
            .map_err(|e| HcclError::from_io("starting the ibverbs progress thread", e))?;
        Ok((node, thread))
    }

    /// Takes `dev` into use: registers the CCL buffers with it.
    pub fn activate(&self, dev: DeviceCtx) -> Result<()> {
        let (a, b) = &self.cfg.ccl;
        // SAFETY: the CCL buffers live as long as the communicator, which
        // owns this node; the registrations are dropped with it.
        let mrs = unsafe {
            [
                dev.register(a.ptr(), a.len())?,
                dev.register(b.ptr(), b.len())?,
            ]
        };
        tracing::info!(
            rank = self.cfg.rank,
            device = %dev.name,
            port = dev.port,
            gid_index = dev.gid_index,
            "ibverbs transport ready"
        );
        let _ = self.active.set(Active {
            ccl_mrs: mrs,
            dev: Arc::new(dev),
        });
        Ok(())
    }

    fn active(&self) -> Result<&Active> {
        self.active.get().ok_or_else(|| {
            HcclError::internal("the ibverbs transport has no device yet (not prepared)")
        })
    }

    /// The local key of `mem`: the CCL buffers' or a cached registration.
    pub fn lkey(&self, mem: &DeviceMem) -> Result<u32> {
        let a = self.active()?;
        for (i, c) in [&self.cfg.ccl.0, &self.cfg.ccl.1].into_iter().enumerate() {
            if mem.same_region(c)
                && mem.addr() >= c.addr()
                && mem.addr() + mem.len() as u64 <= c.addr() + c.len() as u64
            {
                return Ok(a.ccl_mrs[i].lkey());
            }
        }
        self.mrs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .lkey(&a.dev, mem)
    }

    /// This rank's half of a handshake with `to`, on `pending`.
    fn hello(&self, pending: &Pending, to: u32) -> Result<Hello> {
        let a = self.active()?;
        let ccl = |m: &DeviceMem, i: usize| (m.addr(), a.ccl_mrs[i].rkey(), m.len() as u64);
        let base = Hello {
            unique_id: self.cfg.unique_id,
            from: self.cfg.rank,
            to,
            pid: std::process::id(),
            psn: rand_psn(self.cfg.rank, to),
            ..Default::default()
        };
        Ok(pending.hello(
            &a.dev,
            base,
            [ccl(&self.cfg.ccl.0, 0), ccl(&self.cfg.ccl.1, 1)],
        ))
    }

    fn add(&self, conn: Arc<Conn>) {
        self.by_qpn
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(conn.qpn(), conn.clone());
        self.conns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(conn.peer, conn);
        self.arrived.notify_all();
        self.wake_thread();
    }

    /// The connection to `peer`, made now: this rank (the lower) connects
    /// to the peer's listener at `addr`, retrying until `timeout`.
    pub fn connect(
        &self,
        peer: u32,
        addr: SocketAddr,
        host: &str,
        timeout: Duration,
    ) -> Result<Arc<Conn>> {
        if let Some(c) = self
            .conns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&peer)
        {
            return Ok(c.clone());
        }
        let deadline = Instant::now() + timeout;
        let mut backoff = Duration::from_millis(5);
        let mut sock = loop {
            match TcpStream::connect_timeout(&addr, Duration::from_secs(2).min(timeout)) {
                Ok(s) => break s,
                Err(e) if Instant::now() + backoff < deadline => {
                    tracing::debug!(peer, %addr, error = %e, "ibverbs handshake connect failed; retrying");
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_millis(500));
                }
                Err(e) => {
                    return Err(HcclError::roce_connect(format!(
                        "could not reach rank {peer}'s ibverbs listener at {addr} within {}s (HCCL_CONNECT_TIMEOUT): {e}",
                        timeout.as_secs_f64()
                    ))
                    .rank(self.cfg.rank)
                    .peer(peer))
                }
            }
        };
        let io = |e: std::io::Error| {
            HcclError::roce_connect(format!("ibverbs handshake with rank {peer}: {e}"))
                .rank(self.cfg.rank)
                .peer(peer)
        };
        sock.set_read_timeout(Some(
            deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(10)),
        ))
        .map_err(io)?;
        sock.set_nodelay(true).map_err(io)?;
        let a = self.active()?;
        let pending = Pending::new(&a.dev)?;
        let mine = self.hello(&pending, peer)?;
        sock.write_all(&mine.encode()).map_err(io)?;
        let mut buf = [0u8; Hello::LEN];
        sock.read_exact(&mut buf).map_err(io)?;
        let theirs = Hello::decode(&buf).map_err(|e| e.rank(self.cfg.rank).peer(peer))?;
        if theirs.unique_id != self.cfg.unique_id
            || theirs.from != peer
            || theirs.to != self.cfg.rank
        {
            return Err(HcclError::roce_connect(format!(
                "the ibverbs listener at {addr} answered as rank {} of another group, not rank {peer}",
                theirs.from
            ))
            .rank(self.cfg.rank)
            .peer(peer));
        }
        let conn = pending.connect(
            a.dev.clone(),
            &mine,
            &theirs,
            (self.cfg.ib_timeout, self.cfg.retry_cnt),
            sock.try_clone().map_err(io)?,
            host.to_owned(),
        )?;
        // ready: the peer registers the connection (and may write) only
        // now that this end is ready to receive and send
        sock.write_all(&[1]).map_err(io)?;
        let conn = Arc::new(conn);
        self.add(conn.clone());
        tracing::debug!(rank = self.cfg.rank, peer, device = %theirs.device, "ibverbs link up");
        Ok(conn)
    }

    /// Waits until the peer (a lower rank) has connected, up to `timeout`.
    pub fn await_peer(&self, peer: u32, timeout: Duration) -> Result<Arc<Conn>> {
        let deadline = Instant::now() + timeout;
        let mut conns = self.conns.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(c) = conns.get(&peer) {
                return Ok(c.clone());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(HcclError::roce_connect(format!(
                    "rank {peer} did not connect its ibverbs link within {}s (HCCL_CONNECT_TIMEOUT)",
                    timeout.as_secs_f64()
                ))
                .rank(self.cfg.rank)
                .peer(peer));
            }
            conns = self
                .arrived
                .wait_timeout(conns, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Answers one handshake on an accepted socket (the thread's side).
    fn answer(&self, mut sock: TcpStream) -> Result<()> {
        let io = |e: std::io::Error| HcclError::roce_connect(format!("ibverbs handshake: {e}"));
        sock.set_nonblocking(false).map_err(io)?;
        sock.set_read_timeout(Some(Duration::from_secs(5)))
            .map_err(io)?;
        sock.set_nodelay(true).map_err(io)?;
        let mut buf = [0u8; Hello::LEN];
        sock.read_exact(&mut buf).map_err(io)?;
        let theirs = Hello::decode(&buf)?;
        if theirs.unique_id != self.cfg.unique_id || theirs.to != self.cfg.rank {
            return Err(HcclError::roce_connect(format!(
                "dropped an ibverbs handshake from rank {} of another group",
                theirs.from
            )));
        }
        // the peer connects after its own set-up; this rank's may still
        // be finishing
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.active.get().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        let a = self.active()?;
        let pending = Pending::new(&a.dev)?;
        let mine = self.hello(&pending, theirs.from)?;
        let conn = pending.connect(
            a.dev.clone(),
            &mine,
            &theirs,
            (self.cfg.ib_timeout, self.cfg.retry_cnt),
            sock.try_clone().map_err(io)?,
            self.hosts
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&theirs.from)
                .cloned()
                .unwrap_or_default(),
        )?;
        sock.write_all(&mine.encode()).map_err(io)?;
        let mut ready = [0u8; 1];
        sock.read_exact(&mut ready).map_err(io)?;
        self.add(Arc::new(conn));
        tracing::debug!(rank = self.cfg.rank, peer = theirs.from, device = %theirs.device, "ibverbs link up");
        Ok(())
    }

    /// Drains the completion queue (if nobody else is): counters raised,
    /// receives reposted, credits reported. `true` if anything completed.
    pub fn progress(&self) -> bool {
        let Some(a) = self.active.get() else {
            return false;
        };
        let Ok(mut batch) = self.drain.try_lock() else {
            return false;
        };
        let mut any = false;
        loop {
            batch.clear();
            if let Err(e) = a.dev.poll(&mut batch, 16) {
                tracing::warn!(rank = self.cfg.rank, error = %e, "completion queue poll failed");
                break;
            }
            if batch.is_empty() {
                break;
            }
            any = true;
            let by_qpn = self.by_qpn.read().unwrap_or_else(|p| p.into_inner());
            for c in batch.iter() {
                let Some(conn) = by_qpn.get(&c.qpn) else {
                    continue;
                };
                if !c.ok {
                    if !conn.inbox.closed.load(Ordering::Acquire) {
                        let msg = conn.lost_message(&format!(
                            "is unreachable: an RDMA {} failed ({})",
                            if c.recv { "receive" } else { "write" },
                            c.status
                        ));
                        tracing::warn!(rank = self.cfg.rank, peer = conn.peer, "{msg}");
                        conn.fail(msg, true);
                    }
                    continue;
                }
                if let Err(e) = conn.on_completion(c.recv, c.imm) {
                    conn.fail(e.message().to_owned(), false);
                }
            }
            for conn in by_qpn.values() {
                let _ = conn.retry_report();
            }
        }
        drop(batch);
        if any && self.thread_drains.load(Ordering::Relaxed) {
            self.waker.notify();
        }
        any
    }

    fn wake_thread(&self) {
        if let Some(fd) = self
            .wake_tx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            let _ = rustix::io::write(fd, &[1u8]);
        }
    }

    /// Stops the thread (it exits within its poll timeout).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.wake_thread();
    }

    /// The progress thread: handshakes, sockets (a peer's end-of-file is
    /// its death), and completions while the driver sleeps.
    fn run(self: Arc<Self>, listener: TcpListener, wake_rx: OwnedFd) {
        let mut scratch = [0u8; 64];
        while !self.stop.load(Ordering::Acquire) {
            let conns: Vec<Arc<Conn>> = self
                .conns
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .values()
                .cloned()
                .collect();
            let channel = self.active.get().map(|a| a.dev.channel_fd());
            // SAFETY: the channel fd lives as long as the device, which
            // this node keeps (self.active) for the whole loop.
            let channel_fd = channel.map(|fd| unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) });
            let mut fds = vec![
                PollFd::new(&listener, PollFlags::IN),
                PollFd::new(&wake_rx, PollFlags::IN),
            ];
            if let Some(fd) = &channel_fd {
                fds.push(PollFd::from_borrowed_fd(fd.as_fd(), PollFlags::IN));
            }
            let first_conn = fds.len();
            for c in &conns {
                fds.push(PollFd::new(&c.socket, PollFlags::IN));
            }
            let timeout = rustix::event::Timespec {
                tv_sec: 0,
                tv_nsec: 200_000_000,
            };
            if poll(&mut fds, Some(&timeout)).is_err() {
                continue;
            }
            let ready: Vec<bool> = fds.iter().map(|f| !f.revents().is_empty()).collect();
            drop(fds);
            if ready[1] {
                let _ = rustix::io::read(&wake_rx, &mut scratch);
            }
            if ready[0] {
                while let Ok((sock, from)) = listener.accept() {
                    if let Err(e) = self.answer(sock) {
                        tracing::warn!(rank = self.cfg.rank, %from, error = %e, "ibverbs handshake failed");
                    }
                }
            }
            if channel.is_some() && ready[2] {
                if let Some(a) = self.active.get() {
                    a.dev.take_events();
                    if self.thread_drains.load(Ordering::Acquire) {
                        a.dev.arm();
                    }
                }
                self.progress();
            }
            for (i, c) in conns.iter().enumerate() {
                if !ready[first_conn + i] || c.inbox.failed.load(Ordering::Acquire) {
                    continue;
                }
                let mut b = [0u8; 16];
                match (&c.socket).read(&mut b) {
                    Ok(n) if n > 0 => {}
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    _ => {
                        // drain first: a goodbye may be in the queue
                        self.progress();
                        if !c.inbox.closed.load(Ordering::Acquire) {
                            let msg = c.lost_message("is gone: its handshake socket closed without a goodbye (process exited or killed)");
                            tracing::warn!(rank = self.cfg.rank, peer = c.peer, "{msg}");
                            c.fail(msg, true);
                        } else {
                            c.fail(format!("rank {} destroyed its communicator", c.peer), false);
                        }
                        self.waker.notify();
                    }
                }
            }
        }
    }
}

impl ParkHook for Node {
    fn parking(&self) {
        self.thread_drains.store(true, Ordering::Release);
        if let Some(a) = self.active.get() {
            a.dev.arm();
        }
        // completions that came before the queue was armed raise no event
        self.progress();
    }

    fn woke(&self) {
        self.thread_drains.store(false, Ordering::Release);
    }
}

/// A start PSN per pair, varied so that a stale packet of an earlier
/// connection is unlikely to fit.
fn rand_psn(a: u32, b: u32) -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    (t ^ a.wrapping_mul(0x9e37_79b9) ^ b.wrapping_mul(0x85eb_ca6b)) & 0x00ff_ffff
}
