//! Bootstrap: how the ranks of a communicator find each other.
//!
//! Every path ends with the same [`RankTable`]: for each rank, its host
//! identity, the address of its link listener and its CCL buffer size.
//! - [`root_info`]: HCCL's root-info handshake over TCP (`HcclGetRootInfo`
//!   on the root, `HcclCommInitRootInfo` everywhere);
//! - [`rank_table`]: HCCL's rank table JSON (`HcclCommInitClusterInfo`);
//! - [`launcher`]: rank and size from torchrun, Open MPI, MPICH/PMI or
//!   Slurm environment variables, rendezvous at the root address.

pub(crate) mod interface;
pub(crate) mod launcher;
pub(crate) mod rank_table;
pub(crate) mod root_info;

use hccl_platform::{HcclError, Result};
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr, UdpSocket};

/// What each rank tells the others.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RankInfo {
    /// The rank.
    pub rank: u32,
    /// Identifies the host: ranks with equal ids share memory.
    pub host_id: String,
    /// The rank's link listener.
    pub link_addr: SocketAddr,
    /// CCL buffer size, bytes.
    pub buffer_size: u64,
    /// The addresses of the rank's transport components, packed by
    /// component id (`hccl_platform::transport::pack_addresses`); empty
    /// in a rank table, whose ranks are reached at `link_addr` over TCP.
    #[serde(default)]
    pub transports: Vec<u8>,
}

/// Every rank's [`RankInfo`], indexed by rank, plus the group's unique id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RankTable {
    /// The group's unique id: links present it when they connect.
    pub unique_id: [u8; 16],
    /// By rank.
    pub ranks: Vec<RankInfo>,
}

impl RankTable {
    /// Server index of every rank: ranks with the same host id share a
    /// server; servers are numbered in order of their lowest rank.
    pub(crate) fn rank_to_server(&self) -> Vec<u32> {
        let mut hosts: Vec<&str> = Vec::new();
        self.ranks
            .iter()
            .map(|r| match hosts.iter().position(|h| *h == r.host_id) {
                Some(i) => i as u32,
                None => {
                    hosts.push(&r.host_id);
                    hosts.len() as u32 - 1
                }
            })
            .collect()
    }
}

/// This host's identity: hostname, the kernel's boot id and the network
/// namespace, so two containers with the same hostname on different
/// machines differ, one machine's ranks agree whatever IP they use, and
/// processes in different network namespaces of one machine (the test
/// hosts of `tools/netns.sh` and `hccl-test --netns`, or containers) are
/// different hosts: they talk over their own interfaces (TCP), not shared
/// memory. `HCCL_RS_HOST_ID` overrides the name (to declare processes of
/// one namespace separate hosts); the boot id stays, so [`machine_of`]
/// still knows which ranks share the machine's cores.
///
/// The form is `NAME/BOOT_ID/net:INODE`, where NAME is the hostname, with
/// `:NETNS` appended when the namespace has a name under `/run/netns`
/// (`ip netns`) other than the hostname: messages name a host by NAME.
/// Declared, it is `DECLARED/BOOT_ID`.
pub(crate) fn host_id() -> String {
    host_id_from(std::env::var("HCCL_RS_HOST_ID").ok())
}

/// [`host_id`] with the override passed in (`HCCL_RS_HOST_ID`'s value).
fn host_id_from(declared: Option<String>) -> String {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    // Tests declare ranks of one machine to be on different hosts with this.
    if let Some(id) = declared {
        if !id.trim().is_empty() {
            return format!("{}/{}", id.trim(), boot.trim());
        }
    }
    let host = rustix_hostname();
    let (ino, ns_name) = match net_namespace() {
        Some((ino, name)) => (ino.to_string(), name),
        // no /proc: the host is what hostname and boot id say
        None => ("?".into(), None),
    };
    let name = match ns_name {
        Some(ns) if ns != host => format!("{host}:{ns}"),
        _ => host,
    };
    format!("{name}/{}/net:{ino}", boot.trim())
}

/// The calling thread's network namespace: its inode (what tells
/// namespaces apart) and, if `ip netns` named it, the name.
fn net_namespace() -> Option<(u64, Option<String>)> {
    use std::os::unix::fs::MetadataExt;
    // thread-self: a thread that entered another namespace (setns) opens
    // its sockets there, whatever the process's first thread did
    let ns = std::fs::metadata("/proc/thread-self/ns/net")
        .or_else(|_| std::fs::metadata("/proc/self/ns/net"))
        .ok()?;
    // `ip netns add` bind-mounts the namespace at /run/netns/NAME: the
    // mount has the namespace's device and inode
    let name = std::fs::read_dir("/run/netns").ok().and_then(|d| {
        d.flatten().find_map(|e| {
            let m = std::fs::metadata(e.path()).ok()?;
            (m.ino() == ns.ino() && m.dev() == ns.dev())
                .then(|| e.file_name().to_string_lossy().into_owned())
        })
    });
    Some((ns.ino(), name))
}

/// The machine a host id is on: its boot id part (ranks of declared or
/// namespace hosts on one machine share its cores); a host id without one
/// (e.g. a rank table's server id) is its own machine.
pub(crate) fn machine_of(host_id: &str) -> &str {
    match host_id.split('/').nth(1) {
        Some(boot) if !boot.is_empty() => boot,
        _ => host_id,
    }
}

fn rustix_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "localhost".into())
}

/// The local IP to advertise: `HCCL_IF_IP` if set, else the address this
/// host would use to reach `peer` (no packet is sent).
pub(crate) fn local_ip_towards(peer: IpAddr, if_ip: Option<&str>) -> Result<IpAddr> {
    if let Some(ip) = if_ip {
        return ip.trim().parse().map_err(|_| {
            HcclError::para(format!(
                "environment variable HCCL_IF_IP='{ip}' is invalid: expected an IP address"
            ))
        });
    }
    if peer.is_loopback() {
        return Ok(peer);
    }
    let bind: SocketAddr = if peer.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    }
    .parse()
    .expect("literal");
    let s =
        UdpSocket::bind(bind).map_err(|e| HcclError::from_io("choosing the local address", e))?;
    s.connect((peer, 9))
        .map_err(|e| HcclError::from_io(format!("routing towards {peer}"), e))?;
    Ok(s.local_addr()
        .map_err(|e| HcclError::from_io("choosing the local address", e))?
        .ip())
}

/// A fresh random unique id (from the kernel's random source).
pub(crate) fn random_unique_id() -> [u8; 16] {
    let mut id = [0u8; 16];
    let ok = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut id))
        .is_ok();
    if !ok {
        // fall back to time and pid: unique enough to tell groups apart
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        id[..8].copy_from_slice(&(t as u64).to_le_bytes());
        id[8..12].copy_from_slice(&std::process::id().to_le_bytes());
    }
    id
}

/// A 16-byte id derived from `text` (FNV-1a, twice with different seeds):
/// ranks that read the same rank table or launcher environment agree on it.
pub(crate) fn derived_unique_id(text: &str) -> [u8; 16] {
    let h = |seed: u64| {
        text.bytes()
            .fold(seed, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
    };
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&h(0xcbf2_9ce4_8422_2325).to_le_bytes());
    id[8..].copy_from_slice(&h(0x8422_2325_cbf2_9ce4).to_le_bytes());
    id
}

#[cfg(test)]
pub(crate) mod fuzz;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declared_hosts_of_one_machine_share_its_machine() {
        assert_eq!(machine_of("node-a/3f2e-11"), "3f2e-11");
        assert_eq!(machine_of("node-a:hccl-x-h1/3f2e-11/net:4026"), "3f2e-11");
        assert_eq!(
            machine_of("node-a:hccl-x-h0/3f2e-11/net:4025"),
            machine_of("node-a:hccl-x-h1/3f2e-11/net:4026")
        );
        assert_eq!(
            machine_of("test-host1/3f2e-11"),
            machine_of("test-host0/3f2e-11")
        );
        assert_ne!(machine_of("node-a/3f2e-11"), machine_of("node-a/9999"));
        // a rank table's server id has no boot id: its own machine
        assert_eq!(machine_of("10.0.0.7"), "10.0.0.7");
        assert_eq!(machine_of("trailing/"), "trailing/");
        let mine = host_id();
        assert!(!machine_of(&mine).is_empty());
    }

    #[test]
    fn host_id_names_the_host_and_its_network_namespace() {
        let id = host_id_from(None);
        let parts: Vec<&str> = id.split('/').collect();
        assert_eq!(parts.len(), 3, "{id}");
        let (ino, _) = net_namespace().expect("/proc/thread-self/ns/net");
        assert_eq!(parts[2], format!("net:{ino}"), "{id}");
        assert!(parts[0].starts_with(&rustix_hostname()), "{id}");
        // stable: every rank of this namespace computes the same
        assert_eq!(host_id_from(None), id);
    }

    #[test]
    fn a_declared_host_id_overrides_the_namespace() {
        let boot = host_id_from(None).split('/').nth(1).unwrap().to_owned();
        assert_eq!(
            host_id_from(Some(" node-7 ".into())),
            format!("node-7/{boot}")
        );
        // blank is not a declaration
        assert_eq!(host_id_from(Some("  ".into())), host_id_from(None));
    }

    /// A thread in a network namespace of its own is another host; the
    /// thread that stayed keeps its identity. Needs root (CAP_SYS_ADMIN)
    /// for `unshare(CLONE_NEWNET)`; without it the test fails saying so,
    /// unless HCCL_RS_SKIP_NETNS=1.
    #[test]
    fn another_network_namespace_is_another_host() {
        let before = host_id_from(None);
        let other = std::thread::spawn(|| {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).map(|_| host_id_from(None))
        })
        .join()
        .expect("thread");
        match other {
            Ok(other) => {
                assert_ne!(other, before, "a new network namespace must be a new host");
                let (a, b): (Vec<&str>, Vec<&str>) =
                    (before.split('/').collect(), other.split('/').collect());
                // same machine, same boot: only the namespace differs
                assert_eq!(a[..2], b[..2], "{before} vs {other}");
                assert_ne!(a[2], b[2]);
                // and the override still wins there
                assert!(host_id_from(Some("declared".into())).starts_with("declared/"));
            }
            Err(e) if std::env::var("HCCL_RS_SKIP_NETNS").as_deref() == Ok("1") => {
                tracing::warn!(error = %e, "skipped (HCCL_RS_SKIP_NETNS=1): unshare(CLONE_NEWNET)");
            }
            Err(e) => panic!(
                "cannot create a network namespace (unshare(CLONE_NEWNET): {e}): \
                 run as root, or set HCCL_RS_SKIP_NETNS=1 to skip the namespace tests"
            ),
        }
        assert_eq!(host_id_from(None), before);
    }
}
