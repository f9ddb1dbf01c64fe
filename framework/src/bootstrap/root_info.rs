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
use std::collections::BTreeMap;
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

#[derive(Debug, Serialize, Deserialize)]
struct Hello {
    magic: String,
    unique_id: String,
    n_ranks: u32,
    info: RankInfo,
}

#[derive(Debug, Serialize, Deserialize)]
struct Reply {
    ok: bool,
    error: String,
    table: Vec<RankInfo>,
}

fn hex(id: &[u8; 16]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

fn write_frame(s: &mut impl Write, v: &impl Serialize) -> std::io::Result<()> {
    let body = serde_json::to_vec(v).map_err(std::io::Error::other)?;
    let len = u32::try_from(body.len())
        .ok()
        .filter(|&n| n <= MAX_FRAME)
        .ok_or_else(|| {
            std::io::Error::other(format!(
                "frame of {} bytes exceeds the {MAX_FRAME}-byte limit",
                body.len()
            ))
        })?;
    s.write_all(&len.to_le_bytes())?;
    s.write_all(&body)
}

/// Bytes a frame body is read in: the body buffer grows with the bytes
/// that actually arrive, never with what the length prefix claims.
const READ_CHUNK: usize = 8 << 10;

/// Reads one frame: a little-endian `u32` length (at most [`MAX_FRAME`]),
/// then that many bytes of JSON. A peer that claims a large frame and
/// sends little costs only what it sent (the body is read in
/// [`READ_CHUNK`]-byte steps).
fn read_frame<T: for<'de> Deserialize<'de>>(s: &mut impl Read) -> std::io::Result<T> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len);
    if len > MAX_FRAME {
        return Err(std::io::Error::other(format!(
            "frame of {len} bytes is too large"
        )));
    }
    let len = len as usize;
    let mut body = Vec::new();
    let mut chunk = [0u8; READ_CHUNK];
    while body.len() < len {
        let n = (len - body.len()).min(READ_CHUNK);
        s.read_exact(&mut chunk[..n])?;
        body.extend_from_slice(&chunk[..n]);
    }
    serde_json::from_slice(&body).map_err(std::io::Error::other)
}

/// The root's bookkeeping of one rendezvous: which ranks have said hello.
/// Kept apart from the sockets (`C` is a rank's connection) so that what
/// a hello may do to the server can be tested without a network.
struct Rendezvous<C> {
    /// The group's unique id, as hellos carry it.
    uid: String,
    /// The rank count, as the first accepted hello says.
    n_ranks: Option<u32>,
    /// The ranks that joined, by rank. A map, not a vector of `n_ranks`
    /// slots: its size follows the hellos received, not a number a
    /// peer sent.
    joined: BTreeMap<u32, (RankInfo, C)>,
}

/// What the server does with one hello that arrived on a `C`.
#[derive(Debug, PartialEq, Eq)]
enum Admit<C> {
    /// Not of this group (wrong magic or unique id): drop the connection.
    Stranger,
    /// Of this group but unacceptable: tell the rank why on its
    /// connection, then drop it.
    Reject(String, C),
    /// Joined; the table is not complete yet.
    Joined,
    /// Joined, and every rank is in.
    Complete,
}

impl<C> Rendezvous<C> {
    fn new(id: &[u8; 16]) -> Self {
        Rendezvous {
            uid: hex(id),
            n_ranks: None,
            joined: BTreeMap::new(),
        }
    }

    /// Takes `hello` (arriving on `conn`) into account.
    fn admit(&mut self, hello: Hello, conn: C) -> Admit<C> {
        if hello.magic != "hccl-rs" || hello.unique_id != self.uid {
            return Admit::Stranger;
        }
        let rank = hello.info.rank;
        if hello.n_ranks == 0 {
            return Admit::Reject(
                format!("rank {rank} says the communicator has 0 ranks"),
                conn,
            );
        }
        let n = *self.n_ranks.get_or_insert(hello.n_ranks);
        if hello.n_ranks != n {
            return Admit::Reject(
                format!(
                    "rank {rank} says the communicator has {} ranks, others say {n}",
                    hello.n_ranks
                ),
                conn,
            );
        }
        if rank >= n {
            return Admit::Reject(format!("rank {rank} is out of range for {n} ranks"), conn);
        }
        if self.joined.contains_key(&rank) {
            return Admit::Reject(format!("rank {rank} joined twice"), conn);
        }
        self.joined.insert(rank, (hello.info, conn));
        if self.joined.len() == n as usize {
            Admit::Complete
        } else {
            Admit::Joined
        }
    }

    /// The table (by rank) and every rank's connection, once complete.
    fn into_table(self) -> (Vec<RankInfo>, Vec<(u32, C)>) {
        self.joined
            .into_iter()
            .map(|(r, (info, conn))| (info, (r, conn)))
            .unzip()
    }
}

/// Checks the root's reply to rank `rank` of `n_ranks`: accepted, and a
/// table with exactly one entry per rank, in rank order.
fn check_reply(reply: Reply, n_ranks: u32, rank: u32) -> Result<Vec<RankInfo>> {
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
    Ok(reply.table)
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
    let _ = listener.set_nonblocking(true);
    let mut group: Rendezvous<TcpStream> = Rendezvous::new(&id);
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
        match group.admit(hello, s) {
            Admit::Stranger => {
                tracing::warn!(%from, "root info server: dropped a connection with a wrong unique id");
            }
            Admit::Reject(why, mut s) => {
                tracing::warn!(%from, "root info server: {why}");
                let _ = write_frame(
                    &mut s,
                    &Reply {
                        ok: false,
                        error: why,
                        table: vec![],
                    },
                );
            }
            Admit::Joined => {}
            Admit::Complete => {
                let n = group.joined.len();
                let (table, mut conns) = group.into_table();
                for (rank, s) in conns.iter_mut() {
                    let reply = Reply {
                        ok: true,
                        error: String::new(),
                        table: table.clone(),
                    };
                    if let Err(e) = write_frame(s, &reply) {
                        tracing::warn!(rank = *rank, error = %e, "root info server: could not send the table");
                    }
                }
                tracing::debug!(ranks = n, "root info server: table distributed");
                return;
            }
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
    Ok(RankTable {
        unique_id: id,
        ranks: check_reply(reply, n_ranks, rank)?,
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
            transports: Vec::new(),
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

/// Fuzz targets of the root-info wire formats: the 4108-byte blob, the
/// length-prefixed JSON frames, what a hello may do to the rendezvous
/// server, and the reply a rank accepts.
#[cfg(test)]
mod fuzz {
    use super::*;
    use crate::bootstrap::fuzz::{bounded, config, rank_info, small_or_any_u32, socket_addr, text};
    use proptest::prelude::*;

    /// Root-info blobs: random bytes, or the real layout (magic, version,
    /// id, port) around an address field of valid or junk text.
    fn blob() -> impl Strategy<Value = RootInfo> {
        let addr_text = prop_oneof![
            socket_addr().prop_map(|a| a.ip().to_string().into_bytes()),
            "[0-9a-f:.%]{0,70}".prop_map(String::into_bytes),
            proptest::collection::vec(any::<u8>(), 0..70),
        ];
        let structured = (
            prop_oneof![Just(*MAGIC), any::<[u8; 4]>()],
            any::<u32>(),
            any::<[u8; 16]>(),
            any::<u16>(),
            addr_text,
            proptest::collection::vec(any::<u8>(), 0..64),
        )
            .prop_map(|(magic, version, id, port, addr, tail)| {
                let mut b = [0u8; HCCL_ROOT_INFO_BYTES];
                b[0..4].copy_from_slice(&magic);
                b[4..8].copy_from_slice(&version.to_le_bytes());
                b[8..24].copy_from_slice(&id);
                b[24..26].copy_from_slice(&port.to_le_bytes());
                b[28..28 + addr.len()].copy_from_slice(&addr);
                let at = 28 + addr.len();
                b[at..at + tail.len()].copy_from_slice(&tail);
                RootInfo(b)
            });
        let random = proptest::collection::vec(any::<u8>(), HCCL_ROOT_INFO_BYTES)
            .prop_map(|v| RootInfo(v.try_into().expect("4108 bytes")));
        prop_oneof![3 => structured, 1 => random]
    }

    fn hello() -> impl Strategy<Value = Hello> {
        (
            prop_oneof![4 => Just("hccl-rs".to_string()), 1 => text()],
            prop_oneof![
                3 => Just("ab".repeat(16)),
                1 => text(),
            ],
            small_or_any_u32(8),
            rank_info(8),
        )
            .prop_map(|(magic, unique_id, n_ranks, info)| Hello {
                magic,
                unique_id,
                n_ranks,
                info,
            })
    }

    fn reply() -> impl Strategy<Value = Reply> {
        (
            any::<bool>(),
            text(),
            proptest::collection::vec(rank_info(6), 0..8),
        )
            .prop_map(|(ok, error, table)| Reply { ok, error, table })
    }

    /// A frame body: a real message, the same with bytes overwritten, or
    /// random bytes.
    fn body() -> impl Strategy<Value = Vec<u8>> {
        let json = prop_oneof![
            hello().prop_map(|h| serde_json::to_vec(&h).expect("serializable")),
            reply().prop_map(|r| serde_json::to_vec(&r).expect("serializable")),
        ];
        prop_oneof![
            2 => json.clone(),
            2 => (json, proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6)).prop_map(
                |(mut b, edits)| {
                    for (at, byte) in edits {
                        let n = b.len();
                        b[at % n] = byte;
                    }
                    b
                }
            ),
            1 => proptest::collection::vec(any::<u8>(), 0..256),
        ]
    }

    /// A reader over `data` that notes the largest read it was asked for:
    /// a parser that sizes a buffer by a length field asks for that much.
    struct Watched<'a> {
        data: &'a [u8],
        largest_read: usize,
    }

    impl Read for Watched<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.largest_read = self.largest_read.max(buf.len());
            self.data.read(buf)
        }
    }

    proptest! {
        #![proptest_config(config())]

        /// Decoding any blob returns an address or a parameter error; what
        /// it decodes encodes back to the same address and id.
        #[test]
        fn fuzz_root_info_blob(b in blob()) {
            bounded("root info decode", || match b.decode() {
                Ok((addr, id)) => {
                    assert_eq!(RootInfo::encode(addr, id).decode().unwrap(), (addr, id));
                }
                Err(e) => assert_eq!(e.code(), hccl_platform::HcclResult::EPara, "{e}"),
            });
        }

        /// Every address and id survive encode → decode.
        #[test]
        fn fuzz_root_info_roundtrip(addr in socket_addr(), id in any::<[u8; 16]>()) {
            prop_assert_eq!(RootInfo::encode(addr, id).decode().unwrap(), (addr, id));
        }

        /// A frame of any length prefix and any body is a message or an
        /// error: never a panic, never a buffer sized by the prefix (a
        /// prefix above the limit is refused before the body is read).
        #[test]
        fn fuzz_frame_reader(
            prefix in prop_oneof![
                3 => Just(None),
                1 => Just(Some(u32::MAX)),
                1 => Just(Some(MAX_FRAME)),
                1 => Just(Some(MAX_FRAME + 1)),
                2 => any::<u32>().prop_map(Some),
                2 => (0u32..512).prop_map(Some),
            ],
            body in body(),
            keep in any::<prop::sample::Index>(),
        ) {
            let len = prefix.unwrap_or(body.len() as u32);
            let mut stream = len.to_le_bytes().to_vec();
            stream.extend_from_slice(&body);
            // sometimes the connection ends early
            let cut = if keep.index(4) == 0 { keep.index(stream.len() + 1) } else { stream.len() };
            let stream = &stream[..cut];
            for as_reply in [false, true] {
                let mut r = Watched { data: stream, largest_read: 0 };
                let res = bounded("frame read", || if as_reply {
                    read_frame::<Reply>(&mut r).map(|_| ())
                } else {
                    read_frame::<Hello>(&mut r).map(|_| ())
                });
                prop_assert!(r.largest_read <= READ_CHUNK, "asked for {} bytes at once", r.largest_read);
                if len > MAX_FRAME || cut < 4 + (len as usize).min(body.len()) || len as usize > body.len() {
                    prop_assert!(res.is_err());
                }
            }
        }

        /// Whatever is written as a frame reads back the same.
        #[test]
        fn fuzz_frame_roundtrip(h in hello(), r in reply()) {
            let mut buf = Vec::new();
            write_frame(&mut buf, &h).unwrap();
            write_frame(&mut buf, &r).unwrap();
            let mut rd = buf.as_slice();
            let h2: Hello = read_frame(&mut rd).unwrap();
            let r2: Reply = read_frame(&mut rd).unwrap();
            prop_assert_eq!(serde_json::to_value(&h).unwrap(), serde_json::to_value(&h2).unwrap());
            prop_assert_eq!(serde_json::to_value(&r).unwrap(), serde_json::to_value(&r2).unwrap());
            prop_assert!(rd.is_empty());
        }

        /// Any sequence of hellos: strangers are dropped, every rank joins
        /// at most once and only below the agreed count, the table is
        /// complete exactly when every rank has joined, and what the
        /// server keeps grows with the hellos, not with their counts.
        #[test]
        fn fuzz_rendezvous_admission(hellos in proptest::collection::vec(hello(), 1..24)) {
            let id = [0xab; 16];
            let mut group: Rendezvous<usize> = Rendezvous::new(&id);
            let mut joined = 0usize;
            for (i, h) in hellos.into_iter().enumerate() {
                let (stranger, n_claimed, rank) =
                    (h.magic != "hccl-rs" || h.unique_id != hex(&id), h.n_ranks, h.info.rank);
                let agreed = group.n_ranks;
                match bounded("admit", || group.admit(h, i)) {
                    Admit::Stranger => prop_assert!(stranger),
                    Admit::Reject(why, conn) => {
                        prop_assert!(!stranger && !why.is_empty());
                        prop_assert_eq!(conn, i);
                    }
                    outcome => {
                        joined += 1;
                        let n = group.n_ranks.unwrap();
                        prop_assert!(n_claimed == n && rank < n && agreed.is_none_or(|a| a == n));
                        prop_assert_eq!(group.joined.len(), joined);
                        if outcome == Admit::Complete {
                            prop_assert_eq!(joined, n as usize);
                            let (table, conns) = group.into_table();
                            prop_assert_eq!(table.len(), n as usize);
                            prop_assert!(table.iter().enumerate().all(|(r, t)| t.rank == r as u32));
                            prop_assert_eq!(conns.len(), n as usize);
                            return Ok(());
                        }
                    }
                }
                prop_assert!(group.joined.len() <= i + 1);
            }
        }

        /// A rank accepts a reply exactly when the root said yes and sent
        /// one entry per rank, in rank order.
        #[test]
        fn fuzz_reply_check(r in reply(), n in small_or_any_u32(8), me in small_or_any_u32(8)) {
            let want = r.ok
                && r.table.len() == n as usize
                && r.table.iter().enumerate().all(|(i, t)| t.rank == i as u32);
            let len = r.table.len();
            match bounded("reply check", || check_reply(r, n, me)) {
                Ok(t) => prop_assert!(want && t.len() == len),
                Err(e) => prop_assert!(!want && !e.to_string().is_empty()),
            }
        }
    }
}
