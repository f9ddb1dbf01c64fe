//! HCCL's root-info bootstrap.
//!
//! The root calls [`RootInfo::generate`], which starts a rendezvous server
//! and returns an opaque [`HCCL_ROOT_INFO_BYTES`]-byte blob (the server's
//! address and a random unique id) that the application hands to every
//! rank (over MPI, a file, ...). Each rank then calls [`exchange`]: it
//! connects to the root (retrying with backoff up to
//! `HCCL_CONNECT_TIMEOUT`), sends its [`RankInfo`] with the unique id, and
//! receives the full table once all ranks have arrived. Connections that do
//! not present the unique id, or send garbage, are dropped with a log line.

use super::{random_unique_id, RankInfo, RankTable};
use hccl_platform::{HcclError, Result};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// Size of HCCL's `HcclRootInfo`.
pub const HCCL_ROOT_INFO_BYTES: usize = 4108;
const MAGIC: &[u8; 4] = b"HRS1";
const MAX_FRAME: u32 = 16 << 20;

/// HCCL's `HcclRootInfo`: the root's rendezvous address and the group's unique id.
#[derive(Clone, PartialEq, Eq)]
pub struct RootInfo(pub [u8; HCCL_ROOT_INFO_BYTES]);

impl std::fmt::Debug for RootInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.decode() {
            Ok((addr, _)) => write!(f, "RootInfo({addr})"),
            Err(_) => write!(f, "RootInfo(invalid)"),
        }
    }
}

impl RootInfo {
    /// Encodes `addr` and `unique_id`.
    pub fn encode(addr: SocketAddr, unique_id: [u8; 16]) -> RootInfo {
        let mut b = [0u8; HCCL_ROOT_INFO_BYTES];
        b[0..4].copy_from_slice(MAGIC);
        b[4..8].copy_from_slice(&1u32.to_le_bytes());
        b[8..24].copy_from_slice(&unique_id);
        b[24..26].copy_from_slice(&addr.port().to_le_bytes());
        let ip = addr.ip().to_string();
        b[28..28 + ip.len()].copy_from_slice(ip.as_bytes());
        RootInfo(b)
    }

    /// The root address and unique id, or a parameter error if the blob is
    /// not a root info.
    pub fn decode(&self) -> Result<(SocketAddr, [u8; 16])> {
        let b = &self.0;
        if &b[0..4] != MAGIC {
            return Err(HcclError::para(
                "root info is invalid: it was not produced by HcclGetRootInfo",
            ));
        }
        let port = u16::from_le_bytes([b[24], b[25]]);
        let ip_end = b[28..92]
            .iter()
            .position(|&c| c == 0)
            .map_or(92, |p| 28 + p);
        let ip: IpAddr = std::str::from_utf8(&b[28..ip_end])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| HcclError::para("root info is invalid: bad root address"))?;
        let mut id = [0u8; 16];
        id.copy_from_slice(&b[8..24]);
        Ok((SocketAddr::new(ip, port), id))
    }

    /// Starts the rendezvous server on `bind` (port 0 = any free port) and
    /// returns the root info naming it as `advertise`:port. The server runs
    /// on its own thread until every rank has joined or `timeout` passes.
    pub fn generate(bind: SocketAddr, advertise: IpAddr, timeout: Duration) -> Result<RootInfo> {
        let listener = TcpListener::bind(bind).map_err(|e| {
            HcclError::tcp_connect(format!("binding the root info server to {bind}: {e}"))
        })?;
        let port = listener
            .local_addr()
            .map_err(|e| HcclError::from_io("reading the root info server address", e))?
            .port();
        let id = random_unique_id();
        let info = RootInfo::encode(SocketAddr::new(advertise, port), id);
        spawn_server(listener, id, timeout)?;
        Ok(info)
    }

    /// Serves the rendezvous for group `unique_id` at `bind` (the launcher
    /// path, where every rank knows the address and derives the id).
    pub fn serve_at(bind: SocketAddr, unique_id: [u8; 16], timeout: Duration) -> Result<RootInfo> {
        let listener = TcpListener::bind(bind).map_err(|e| {
            HcclError::tcp_connect(format!("binding the rendezvous server to {bind}: {e}"))
        })?;
        spawn_server(listener, unique_id, timeout)?;
        Ok(RootInfo::encode(bind, unique_id))
    }
}

#[derive(Serialize, Deserialize)]
struct Hello {
    magic: String,
    unique_id: String,
    n_ranks: u32,
    info: RankInfo,
}

#[derive(Serialize, Deserialize)]
struct Reply {
    ok: bool,
    error: String,
    table: Vec<RankInfo>,
}

fn hex(id: &[u8; 16]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

fn write_frame(s: &mut TcpStream, v: &impl Serialize) -> std::io::Result<()> {
    let body = serde_json::to_vec(v).map_err(std::io::Error::other)?;
    s.write_all(&(body.len() as u32).to_le_bytes())?;
    s.write_all(&body)
}

fn read_frame<T: for<'de> Deserialize<'de>>(s: &mut TcpStream) -> std::io::Result<T> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len);
    if len > MAX_FRAME {
        return Err(std::io::Error::other(format!(
            "frame of {len} bytes is too large"
        )));
    }
    let mut body = vec![0u8; len as usize];
    s.read_exact(&mut body)?;
    serde_json::from_slice(&body).map_err(std::io::Error::other)
}

fn spawn_server(listener: TcpListener, id: [u8; 16], timeout: Duration) -> Result<()> {
    std::thread::Builder::new()
        .name("hccl-root".into())
        .spawn(move || serve(listener, id, timeout))
        .map(|_| ())
        .map_err(|e| HcclError::from_io("starting the root info server", e))
}

/// The rendezvous server: collects one hello per rank, then sends everyone the table.
fn serve(listener: TcpListener, id: [u8; 16], timeout: Duration) {
    let deadline = Instant::now() + timeout;
    let uid = hex(&id);
    let _ = listener.set_nonblocking(true);
    let mut joined: Vec<Option<(RankInfo, TcpStream)>> = Vec::new();
    let mut n_ranks: Option<u32> = None;
    while Instant::now() < deadline {
        let (mut s, from) = match listener.accept() {
            Ok(x) => x,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(2));
                continue;
            }
            Err(e) => {
                tracing::warn!(error = %e, "root info server: accept failed");
                continue;
            }
        };
        let _ = s.set_nonblocking(false);
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        let hello: Hello = match read_frame(&mut s) {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!(%from, error = %e, "root info server: dropped a connection that did not speak the protocol");
                continue;
            }
        };
        if hello.magic != "hccl-rs" || hello.unique_id != uid {
            tracing::warn!(%from, "root info server: dropped a connection with a wrong unique id");
            continue;
        }
        let reject = |s: &mut TcpStream, why: String| {
            tracing::warn!(%from, "root info server: {why}");
            let _ = write_frame(
                s,
                &Reply {
                    ok: false,
                    error: why,
                    table: vec![],
                },
            );
        };
        let n = *n_ranks.get_or_insert(hello.n_ranks);
        if hello.n_ranks != n {
            reject(
                &mut s,
                format!(
                    "rank {} says the communicator has {} ranks, others say {n}",
                    hello.info.rank, hello.n_ranks
                ),
            );
            continue;
        }
        if joined.is_empty() {
            joined = (0..n).map(|_| None).collect();
        }
        let r = hello.info.rank as usize;
        if r >= joined.len() {
            reject(&mut s, format!("rank {r} is out of range for {n} ranks"));
            continue;
        }
        if joined[r].is_some() {
            reject(&mut s, format!("rank {r} joined twice"));
            continue;
        }
        joined[r] = Some((hello.info, s));
        if joined.iter().all(Option::is_some) {
            let mut all: Vec<(RankInfo, TcpStream)> = joined.into_iter().flatten().collect();
            let table: Vec<RankInfo> = all.iter().map(|(i, _)| i.clone()).collect();
            for (info, s) in all.iter_mut() {
                let reply = Reply {
                    ok: true,
                    error: String::new(),
                    table: table.clone(),
                };
                if let Err(e) = write_frame(s, &reply) {
                    tracing::warn!(rank = info.rank, error = %e, "root info server: could not send the table");
                }
            }
            tracing::debug!(ranks = n, "root info server: table distributed");
            return;
        }
    }
    tracing::warn!("root info server: not every rank joined before the timeout");
}

/// Joins the group described by `root`: sends `me`, returns the full table.
pub(crate) fn exchange(
    root: &RootInfo,
    n_ranks: u32,
    me: RankInfo,
    timeout: Duration,
) -> Result<RankTable> {
    let (addr, id) = root.decode()?;
    let rank = me.rank;
    let deadline = Instant::now() + timeout;
    let mut backoff = Duration::from_millis(10);
    let mut s = loop {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
            Ok(s) => break s,
            Err(e) if Instant::now() + backoff < deadline => {
                tracing::debug!(%addr, error = %e, "root not reachable yet; retrying");
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
            Err(e) => {
                return Err(HcclError::tcp_connect(format!(
                    "could not reach the root at {addr} within {}s (HCCL_CONNECT_TIMEOUT): {e}",
                    timeout.as_secs_f64()
                ))
                .rank(rank))
            }
        }
    };
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_secs(1));
    let _ = s.set_read_timeout(Some(left));
    let hello = Hello {
        magic: "hccl-rs".into(),
        unique_id: hex(&id),
        n_ranks,
        info: me,
    };
    write_frame(&mut s, &hello).map_err(|e| {
        HcclError::tcp_transfer(format!("sending rank info to the root: {e}")).rank(rank)
    })?;
    let reply: Reply = read_frame(&mut s).map_err(|e| {
        HcclError::timeout(format!(
            "waiting for every rank to reach the root at {addr} (HCCL_CONNECT_TIMEOUT {}s): {e}",
            timeout.as_secs_f64()
        ))
        .rank(rank)
    })?;
    if !reply.ok {
        return Err(
            HcclError::para(format!("the root rejected this rank: {}", reply.error)).rank(rank),
        );
    }
    if reply.table.len() != n_ranks as usize
        || reply
            .table
            .iter()
            .enumerate()
            .any(|(i, r)| r.rank != i as u32)
    {
        return Err(HcclError::internal("the root sent a malformed rank table").rank(rank));
    }
    Ok(RankTable {
        unique_id: id,
        ranks: reply.table,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(rank: u32) -> RankInfo {
        RankInfo {
            rank,
            host_id: "h".into(),
            link_addr: "127.0.0.1:1".parse().unwrap(),
            buffer_size: 1 << 20,
            shm: None,
        }
    }

    #[test]
    fn blob_roundtrip() {
        let addr: SocketAddr = "10.1.2.3:60001".parse().unwrap();
        let ri = RootInfo::encode(addr, [5; 16]);
        assert_eq!(ri.0.len(), 4108);
        assert_eq!(ri.decode().unwrap(), (addr, [5; 16]));
        let e = RootInfo([0; HCCL_ROOT_INFO_BYTES]).decode().unwrap_err();
        assert!(
            e.to_string().contains("not produced by HcclGetRootInfo"),
            "{e}"
        );
    }

    #[test]
    fn ranks_get_the_table_and_strangers_are_dropped() {
        let root = RootInfo::generate(
            "127.0.0.1:0".parse().unwrap(),
            "127.0.0.1".parse().unwrap(),
            Duration::from_secs(20),
        )
        .unwrap();
        let (addr, _) = root.decode().unwrap();
        // garbage and a wrong unique id first: the server must survive them
        let mut junk = TcpStream::connect(addr).unwrap();
        junk.write_all(&[0xff; 64]).unwrap();
        let mut wrong = TcpStream::connect(addr).unwrap();
        let bad = Hello {
            magic: "hccl-rs".into(),
            unique_id: "00".repeat(16),
            n_ranks: 3,
            info: info(0),
        };
        write_frame(&mut wrong, &bad).unwrap();
        let handles: Vec<_> = (0..3)
            .map(|r| {
                let root = root.clone();
                std::thread::spawn(move || exchange(&root, 3, info(r), Duration::from_secs(20)))
            })
            .collect();
        for h in handles {
            let t = h.join().unwrap().unwrap();
            assert_eq!(t.ranks.len(), 3);
            assert_eq!(t.ranks[2].rank, 2);
        }
    }

    #[test]
    fn unreachable_root_times_out_with_the_variable_named() {
        // a port nobody listens on
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        let root = RootInfo::encode(addr, [1; 16]);
        let e = exchange(&root, 2, info(1), Duration::from_millis(300)).unwrap_err();
        assert_eq!(e.code(), hccl_platform::HcclResult::ETcpConnect);
        assert!(e.to_string().contains("HCCL_CONNECT_TIMEOUT"), "{e}");
    }
}
