//! Newcomers on a rank's listener: accepted connections whose introduction
//! has not all arrived yet.
//!
//! The progress thread reads introductions without blocking, alongside
//! everything else it watches, so a connection that sends nothing (or a
//! byte a second) never delays a real peer or any traffic. Each newcomer
//! has [`INTRO_DEADLINE`] to introduce itself; at most [`MAX_PENDING`] wait
//! at once, and a new arrival beyond that evicts the oldest (a real peer
//! introduces itself at once, so the oldest is the likeliest stray).

use super::wire::Hello;
use std::collections::{HashMap, VecDeque};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

/// How long an accepted connection may take to introduce itself.
pub(super) const INTRO_DEADLINE: Duration = Duration::from_secs(5);
/// Most connections waiting to introduce themselves at once.
pub(super) const MAX_PENDING: usize = 64;

#[derive(Debug)]
struct Newcomer {
    stream: TcpStream,
    from: SocketAddr,
    buf: [u8; Hello::LEN],
    got: usize,
    deadline: Instant,
}

/// A link some of whose sockets have introduced themselves.
#[derive(Debug)]
struct Gathering {
    socks: Vec<Option<TcpStream>>,
    deadline: Instant,
}

/// What the lobby hands on: a peer's link, all its sockets introduced,
/// socket 0 first.
pub(super) type Arrival = (u32, Vec<TcpStream>);

/// The newcomers of one listener.
#[derive(Debug, Default)]
pub(super) struct Lobby {
    pending: VecDeque<Newcomer>,
    gathering: HashMap<u32, Gathering>,
}

impl Lobby {
    /// Accepts every connection waiting on `listener` (non-blocking).
    pub fn accept_all(&mut self, listener: &TcpListener, rank: u32) {
        while let Ok((stream, from)) = listener.accept() {
            if stream.set_nonblocking(true).is_err() {
                continue;
            }
            if self.pending.len() >= MAX_PENDING {
                if let Some(old) = self.pending.pop_front() {
                    tracing::warn!(
                        rank,
                        from = %old.from,
                        "dropped a link connection still silent when {MAX_PENDING} newer ones waited"
                    );
                }
            }
            self.pending.push_back(Newcomer {
                stream,
                from,
                buf: [0; Hello::LEN],
                got: 0,
                deadline: Instant::now() + INTRO_DEADLINE,
            });
        }
    }

    /// The sockets to watch for readability, in the order
    /// [`Lobby::read_ready`] expects its flags.
    pub fn fds(&self) -> impl Iterator<Item = std::os::fd::BorrowedFd<'_>> {
        self.pending.iter().map(|n| n.stream.as_fd())
    }

    /// Reads the introductions of the newcomers flagged readable in
    /// `ready` (same order as [`Lobby::fds`]), drops strays and expired
    /// ones, and returns the links now complete. `unique_id` and `rank`
    /// say whom a valid introduction is for.
    pub fn read_ready(&mut self, ready: &[bool], unique_id: &[u8; 16], rank: u32) -> Vec<Arrival> {
        let now = Instant::now();
        let mut done = Vec::new();
        let mut keep = VecDeque::with_capacity(self.pending.len());
        for (i, mut n) in std::mem::take(&mut self.pending).into_iter().enumerate() {
            if ready.get(i).copied().unwrap_or(false) {
                use std::io::Read;
                match n.stream.read(&mut n.buf[n.got..]) {
                    Ok(0) => {
                        tracing::debug!(rank, from = %n.from, "a link connection closed before introducing itself");
                        continue;
                    }
                    Ok(k) => n.got += k,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        tracing::debug!(rank, from = %n.from, error = %e, "a link connection failed before introducing itself");
                        continue;
                    }
                }
            }
            if n.got == Hello::LEN {
                let hello = Hello::decode(&n.buf)
                    .filter(|h| &h.unique_id == unique_id && h.to == rank && h.from < rank);
                match hello {
                    Some(h) => {
                        if let Some(a) = self.gather(h, n.stream, now) {
                            done.push(a);
                        }
                    }
                    None => tracing::warn!(
                        rank,
                        from = %n.from,
                        "dropped a link connection with a wrong magic, unique id or rank pair"
                    ),
                }
                continue;
            }
            if now >= n.deadline {
                tracing::warn!(
                    rank,
                    from = %n.from,
                    bytes = n.got,
                    "dropped a link connection that did not introduce itself within {}s",
                    INTRO_DEADLINE.as_secs()
                );
                continue;
            }
            keep.push_back(n);
        }
        self.pending = keep;
        self.gathering.retain(|peer, g| {
            let alive = now < g.deadline;
            if !alive {
                tracing::warn!(
                    rank,
                    peer,
                    "dropped a half-connected link: not all its sockets arrived in time"
                );
            }
            alive
        });
        done
    }

    /// Files socket `h.index` of peer `h.from`'s link; the whole link
    /// once every socket is there.
    fn gather(&mut self, h: Hello, stream: TcpStream, now: Instant) -> Option<Arrival> {
        let count = h.count as usize;
        let g = self.gathering.entry(h.from).or_insert_with(|| Gathering {
            socks: (0..count).map(|_| None).collect(),
            deadline: now + INTRO_DEADLINE,
        });
        if g.socks.len() != count {
            // a new attempt with another socket count replaces the old one
            *g = Gathering {
                socks: (0..count).map(|_| None).collect(),
                deadline: now + INTRO_DEADLINE,
            };
        }
        g.socks[h.index as usize] = Some(stream);
        if g.socks.iter().all(Option::is_some) {
            let g = self.gathering.remove(&h.from).expect("present");
            return Some((h.from, g.socks.into_iter().flatten().collect()));
        }
        None
    }

    /// When the next newcomer's time runs out, if any waits.
    pub fn next_deadline(&self) -> Option<Instant> {
        let a = self.pending.iter().map(|n| n.deadline).min();
        let b = self.gathering.values().map(|g| g.deadline).min();
        a.into_iter().chain(b).min()
    }

    /// Newcomers waiting to introduce themselves.
    pub fn waiting(&self) -> usize {
        self.pending.len()
    }
}
