//! Test hosts as network namespaces, as `tools/netns.sh` makes them (the
//! two agree on every name, so either can tear down what the other made).
//!
//! A host is a network namespace `hccl-TAG-hN` with loopback up and one
//! veth, `hccl0` inside, to a bridge `hcclbK` in the root namespace. Host N
//! is 198.18.K.(N+1)/24 (the benchmarking range 198.18.0.0/15), the bridge
//! 198.18.K.254, so the root namespace reaches every host. K is the first
//! bridge index not taken: creating the bridge claims it, so runs side by
//! side get subnets of their own. The bridge's alias is `hccl-TAG`.
//!
//! Processes in different namespaces have different host identities (the
//! namespace is part of it), so ranks inside one host share memory and
//! ranks on different hosts talk TCP over the veths.
//!
//! A tag of lowercase letters followed by a process id (`ht4711`) belongs
//! to that process: [`sweep_stale`] removes its hosts once it is gone, the
//! way stale shared-memory segments are swept. Everything here needs root
//! and iproute2 (`ip`; `tc` for a rate limit).

use hccl_adapter::{HcclError, Result};
use std::ffi::OsStr;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The interface of a host, inside its namespace.
pub const HOST_IFNAME: &str = "hccl0";

/// How ranks are placed on hosts: `H` hosts in consecutive blocks (sizes
/// differing by at most one, as `hccl-test --hosts`) or an explicit count
/// of ranks per host (`2,1,3`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Layout {
    /// This many hosts, rank r on host `r * H / ranks`.
    Blocks(u32),
    /// Ranks per host, in rank order.
    PerHost(Vec<u32>),
}

impl Layout {
    /// Parses `H` or `a,b,c` (every count at least 1).
    pub fn parse(spec: &str) -> Result<Layout> {
        let bad = || {
            HcclError::para(format!(
                "--netns '{spec}': expected a host count (2) or ranks per host (2,1,3)"
            ))
        };
        let counts: Vec<u32> = spec
            .split(',')
            .map(|c| c.trim().parse::<u32>().map_err(|_| bad()))
            .collect::<Result<_>>()?;
        if counts.contains(&0) {
            return Err(HcclError::para(format!(
                "--netns '{spec}': every host needs at least one rank (a count of 0)"
            )));
        }
        Ok(match counts.as_slice() {
            [h] if !spec.contains(',') => Layout::Blocks(*h),
            _ => Layout::PerHost(counts),
        })
    }

    /// Number of hosts.
    pub fn hosts(&self) -> u32 {
        match self {
            Layout::Blocks(h) => *h,
            Layout::PerHost(c) => c.len() as u32,
        }
    }

    /// Checks the layout against `ranks` ranks.
    pub fn check(&self, ranks: u32) -> Result<()> {
        match self {
            Layout::Blocks(h) if *h == 0 || *h > ranks => Err(HcclError::para(format!(
                "--netns {h}: the host count must be between 1 and the rank count {ranks}"
            ))),
            Layout::PerHost(c) if c.iter().sum::<u32>() != ranks => Err(HcclError::para(format!(
                "--netns {}: places {} ranks, but -p is {ranks}",
                c.iter().map(u32::to_string).collect::<Vec<_>>().join(","),
                c.iter().sum::<u32>()
            ))),
            _ if self.hosts() > MAX_HOSTS => Err(HcclError::para(format!(
                "--netns: at most {MAX_HOSTS} hosts (one /24 subnet)"
            ))),
            _ => Ok(()),
        }
    }

    /// The host of `rank` among `ranks` (after [`Layout::check`]).
    pub fn host_of(&self, rank: u32, ranks: u32) -> u32 {
        match self {
            Layout::Blocks(h) => (rank as u64 * *h as u64 / ranks.max(1) as u64) as u32,
            Layout::PerHost(c) => {
                let mut end = 0;
                for (h, n) in c.iter().enumerate() {
                    end += n;
                    if rank < end {
                        return h as u32;
                    }
                }
                c.len() as u32 - 1
            }
        }
    }
}

/// This process's CPUs (its affinity mask), from /proc.
pub fn allowed_cpus() -> Vec<usize> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap_or("");
    parse_cpu_list(list)
}

/// Parses a CPU list such as `0-3,8` (what /proc and taskset print).
pub fn parse_cpu_list(list: &str) -> Vec<usize> {
    let mut cpus = Vec::new();
    for part in list
        .trim()
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(a), Ok(b)) = (a.trim().parse::<usize>(), b.trim().parse::<usize>()) {
            cpus.extend(a..=b);
        }
    }
    cpus
}

/// The CPUs of each of `hosts` hosts when `cpus` are split among them in
/// consecutive slices, as if each host had cores of its own; `None` when
/// there are fewer CPUs than hosts (then the hosts share them).
///
/// Why: ranks pin themselves within their host (local rank i on the i-th
/// CPU of the mask they inherit), so hosts on one machine that all see
/// every CPU would stack their first ranks on the first CPU.
pub fn cpu_slices(cpus: &[usize], hosts: u32) -> Option<Vec<Vec<usize>>> {
    let (n, h) = (cpus.len(), hosts as usize);
    if h == 0 || n < h {
        return None;
    }
    Some(
        (0..h)
            .map(|i| cpus[i * n / h..(i + 1) * n / h].to_vec())
            .collect(),
    )
}

/// Hosts in one subnet: 198.18.K.1 to .253 (.254 is the bridge).
pub const MAX_HOSTS: u32 = 253;

/// Where program `name` is: on PATH, else where Debian puts system tools
/// (a non-root PATH often lacks the sbin directories).
pub fn program_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// [`program_path`] of an iproute2 tool, or an error saying to install it.
fn program(name: &str) -> Result<PathBuf> {
    program_path(name).ok_or_else(|| {
            HcclError::not_support(format!(
                "network namespace hosts need '{name}' (iproute2), which is not installed: apt-get install -y iproute2"
            ))
        })
}

/// The effective user id, from /proc (no system call wrapper needed).
fn euid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// Whether namespace hosts can be made here: root and `ip` present; the
/// error says which is missing.
pub fn available() -> Result<()> {
    program("ip")?;
    match euid() {
        Some(0) => Ok(()),
        uid => Err(HcclError::not_support(format!(
            "network namespace hosts need root (creating namespaces, veths and bridges); running as uid {}",
            uid.map_or("?".into(), |u| u.to_string())
        ))),
    }
}

/// Runs `ip ARGS` (or `tc`), failing with its stderr.
fn run(prog: &str, args: &[&str]) -> Result<()> {
    let out = Command::new(program(prog)?)
        .args(args)
        .output()
        .map_err(|e| HcclError::from_io(format!("running {prog} {}", args.join(" ")), e))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(HcclError::syscall(format!(
            "{prog} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// Checks a tag: it becomes part of namespace names and the bridge alias.
fn check_tag(tag: &str) -> Result<()> {
    if tag.is_empty()
        || tag.len() > 24
        || !tag
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    {
        return Err(HcclError::para(format!(
            "namespace tag '{tag}' must be 1 to 24 lowercase letters or digits"
        )));
    }
    Ok(())
}

/// The namespace name of host `h` of `tag`.
pub fn host_name(tag: &str, h: u32) -> String {
    format!("hccl-{tag}-h{h}")
}

/// The root side of host `h`'s veth on bridge index `k`.
fn veth(k: u8, h: u32) -> String {
    format!("hcclv{k}h{h}")
}

/// Namespace names under /run/netns.
fn namespaces() -> Vec<String> {
    std::fs::read_dir("/run/netns")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Bridges `hcclbK` and the tag of each (from the alias `hccl-TAG`).
fn bridges() -> Vec<(u8, String)> {
    let Ok(d) = std::fs::read_dir("/sys/class/net") else {
        return Vec::new();
    };
    d.flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let k = name.strip_prefix("hcclb")?.parse::<u8>().ok()?;
            let alias = std::fs::read_to_string(e.path().join("ifalias")).ok()?;
            Some((k, alias.trim().strip_prefix("hccl-")?.to_owned()))
        })
        .collect()
}

/// The host index of namespace `name` if it is a host of `tag`.
fn host_index(name: &str, tag: &str) -> Option<u32> {
    name.strip_prefix(&format!("hccl-{tag}-h"))?.parse().ok()
}

/// Whether an interface uses an address in 198.18.K.0/24 (then K is not
/// ours to take, whoever configured it).
fn subnet_in_use(k: u8) -> bool {
    let Some(ip) = program_path("ip") else {
        return false;
    };
    let Ok(out) = Command::new(ip)
        .args([
            "-4",
            "-o",
            "addr",
            "show",
            "to",
            &format!("198.18.{k}.0/24"),
        ])
        .output()
    else {
        return false;
    };
    !out.stdout.is_empty()
}

/// Hosts made by this process: removed when dropped (or by
/// [`NetnsHosts::down`]), only what this value made.
#[derive(Debug)]
pub struct NetnsHosts {
    tag: String,
    k: u8,
    hosts: u32,
    /// The bridge, once made.
    bridge: bool,
    /// Namespaces made, by host index.
    made: Vec<u32>,
}

impl NetnsHosts {
    /// Makes `hosts` hosts `hccl-TAG-h0..` on a bridge of their own, each
    /// link limited to `rate` (tc's syntax: `1gbit`, `100mbit`) in both
    /// directions if given. Fails if hosts of `tag` exist already; on any
    /// failure what was made is removed.
    pub fn up(tag: &str, hosts: u32, rate: Option<&str>) -> Result<NetnsHosts> {
        check_tag(tag)?;
        available()?;
        if hosts == 0 || hosts > MAX_HOSTS {
            return Err(HcclError::para(format!(
                "namespace hosts: {hosts} requested, 1 to {MAX_HOSTS} possible"
            )));
        }
        if rate.is_some() {
            program("tc")?;
        }
        if bridges().iter().any(|(_, t)| t == tag)
            || namespaces().iter().any(|n| host_index(n, tag).is_some())
        {
            return Err(HcclError::para(format!(
                "hosts of tag '{tag}' exist already (tools/netns.sh down --tag {tag})"
            )));
        }
        // claim a subnet: the bridge's name is the lock
        let mut claimed = None;
        for k in 0..=255u8 {
            if subnet_in_use(k) {
                continue;
            }
            match run(
                "ip",
                &["link", "add", &format!("hcclb{k}"), "type", "bridge"],
            ) {
                Ok(()) => {
                    claimed = Some(k);
                    break;
                }
                Err(e) if e.to_string().contains("File exists") => continue,
                Err(e) => return Err(e.during("creating the hosts' bridge")),
            }
        }
        let k = claimed.ok_or_else(|| {
            HcclError::unavail("no free bridge index for namespace hosts (hcclb0..hcclb255 taken)")
        })?;
        let mut me = NetnsHosts {
            tag: tag.to_owned(),
            k,
            hosts,
            bridge: true,
            made: Vec::new(),
        };
        // on error `me` is dropped here, removing what was made
        me.build(rate)?;
        tracing::debug!(tag, hosts, subnet = %me.subnet(), "namespace hosts up");
        Ok(me)
    }

    fn build(&mut self, rate: Option<&str>) -> Result<()> {
        let (k, b) = (self.k, format!("hcclb{}", self.k));
        run(
            "ip",
            &[
                "link",
                "set",
                "dev",
                &b,
                "alias",
                &format!("hccl-{}", self.tag),
            ],
        )?;
        run(
            "ip",
            &[
                "addr",
                "add",
                &format!("{}/24", self.bridge_addr()),
                "dev",
                &b,
            ],
        )?;
        run("ip", &["link", "set", &b, "up"])?;
        for h in 0..self.hosts {
            let ns = self.name(h);
            run("ip", &["netns", "add", &ns])?;
            self.made.push(h);
            run("ip", &["-n", &ns, "link", "set", "lo", "up"])?;
            let v = veth(k, h);
            // the peer is created inside the namespace, so every host's
            // interface has the same name
            run(
                "ip",
                &[
                    "link",
                    "add",
                    &v,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    HOST_IFNAME,
                    "netns",
                    &ns,
                ],
            )?;
            run("ip", &["link", "set", &v, "master", &b, "up"])?;
            run(
                "ip",
                &[
                    "-n",
                    &ns,
                    "addr",
                    "add",
                    &format!("{}/24", self.addr(h)),
                    "dev",
                    HOST_IFNAME,
                ],
            )?;
            run("ip", &["-n", &ns, "link", "set", HOST_IFNAME, "up"])?;
            if let Some(rate) = rate {
                // htb on both ends: the root side's egress is the traffic
                // into the host, the inside's egress the traffic out of it
                for (netns, dev) in [(None, v.as_str()), (Some(ns.as_str()), HOST_IFNAME)] {
                    let mut pre: Vec<&str> = Vec::new();
                    if let Some(n) = netns {
                        pre.extend(["-n", n]);
                    }
                    let qdisc = [&pre[..], &["qdisc", "add", "dev", dev, "root"]].concat();
                    run(
                        "tc",
                        &[&qdisc[..], &["handle", "1:", "htb", "default", "1"]].concat(),
                    )?;
                    let class = [&pre[..], &["class", "add", "dev", dev, "parent", "1:"]].concat();
                    run(
                        "tc",
                        &[
                            &class[..],
                            &[
                                "classid", "1:1", "htb", "rate", rate, "ceil", rate, "quantum",
                                "60000",
                            ],
                        ]
                        .concat(),
                    )?;
                }
            }
        }
        Ok(())
    }

    /// The tag.
    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// Number of hosts.
    pub fn hosts(&self) -> u32 {
        self.hosts
    }

    /// Host `h`'s namespace name.
    pub fn name(&self, h: u32) -> String {
        host_name(&self.tag, h)
    }

    /// Host `h`'s address.
    pub fn addr(&self, h: u32) -> Ipv4Addr {
        Ipv4Addr::new(198, 18, self.k, h as u8 + 1)
    }

    /// The bridge's address: the root namespace's side of the hosts' subnet.
    pub fn bridge_addr(&self) -> Ipv4Addr {
        Ipv4Addr::new(198, 18, self.k, 254)
    }

    /// The hosts' subnet, `198.18.K.0/24`.
    pub fn subnet(&self) -> String {
        format!("198.18.{}.0/24", self.k)
    }

    /// A command that runs `program` inside host `h` (`ip netns exec`,
    /// which execs it: the child's process id is the program's).
    pub fn command(&self, h: u32, program: impl AsRef<OsStr>) -> Command {
        let ip = self::program("ip").unwrap_or_else(|_| "ip".into());
        let mut c = Command::new(ip);
        c.args(["netns", "exec"]).arg(self.name(h)).arg(program);
        c
    }

    /// Removes the hosts now, reporting a failure (dropping removes them too,
    /// logging one).
    pub fn down(mut self) -> Result<()> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<()> {
        let mut first_err = None;
        let mut note = |r: Result<()>| {
            if let Err(e) = r {
                first_err.get_or_insert(e);
            }
        };
        for h in std::mem::take(&mut self.made) {
            // the root side first, synchronously: deleting a namespace frees
            // its veth pair only later, and the next run may reuse the name
            let _ = run("ip", &["link", "del", &veth(self.k, h)]);
            note(run("ip", &["netns", "del", &self.name(h)]));
        }
        if std::mem::take(&mut self.bridge) {
            note(run("ip", &["link", "del", &format!("hcclb{}", self.k)]));
        }
        match first_err {
            None => Ok(()),
            Some(e) => Err(e.during(format!("removing the namespace hosts of tag {}", self.tag))),
        }
    }
}

impl Drop for NetnsHosts {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            tracing::warn!(error = %e, "namespace hosts not fully removed");
        }
    }
}

/// Removes every host and the bridge of `tag`, whoever made them (as
/// `tools/netns.sh down --tag TAG`); nothing there is not an error.
pub fn down_tag(tag: &str) -> Result<()> {
    check_tag(tag)?;
    let bridge = bridges()
        .into_iter()
        .find(|(_, t)| t == tag)
        .map(|(k, _)| k);
    let mut first_err = None;
    for ns in namespaces() {
        let Some(h) = host_index(&ns, tag) else {
            continue;
        };
        if let Some(k) = bridge {
            let _ = run("ip", &["link", "del", &veth(k, h)]);
        }
        if let Err(e) = run("ip", &["netns", "del", &ns]) {
            first_err.get_or_insert(e);
        }
    }
    if let Some(k) = bridge {
        if let Err(e) = run("ip", &["link", "del", &format!("hcclb{k}")]) {
            first_err.get_or_insert(e);
        }
    }
    first_err.map_or(Ok(()), Err)
}

/// The owner process of a tag of the form letters + process id.
fn owner_pid(tag: &str) -> Option<u32> {
    let digits = tag.trim_start_matches(|c: char| c.is_ascii_lowercase());
    if digits.len() == tag.len() || digits.is_empty() {
        return None;
    }
    digits.parse().ok()
}

/// Removes the hosts of tags whose owner process (the number ending the
/// tag) is gone: what runs that were killed before they could clean up
/// left behind. Returns the tags removed.
pub fn sweep_stale() -> Vec<String> {
    let alive = |pid: u32| Path::new(&format!("/proc/{pid}")).exists();
    let mut tags: Vec<String> = bridges().into_iter().map(|(_, t)| t).collect();
    tags.extend(namespaces().into_iter().filter_map(|n| {
        let rest = n.strip_prefix("hccl-")?;
        let (tag, h) = rest.rsplit_once("-h")?;
        h.parse::<u32>().ok()?;
        Some(tag.to_owned())
    }));
    tags.sort();
    tags.dedup();
    tags.retain(|t| owner_pid(t).is_some_and(|p| !alive(p)) && check_tag(t).is_ok());
    for t in &tags {
        match down_tag(t) {
            Ok(()) => tracing::info!(tag = %t, "removed namespace hosts left by a dead process"),
            Err(e) => tracing::warn!(tag = %t, error = %e, "stale namespace hosts not removed"),
        }
    }
    tags
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts() {
        let b = Layout::parse("2").unwrap();
        assert_eq!(b, Layout::Blocks(2));
        b.check(5).unwrap();
        // blocks of 3 and 2, as --hosts
        let hosts: Vec<u32> = (0..5).map(|r| b.host_of(r, 5)).collect();
        assert_eq!(hosts, [0, 0, 0, 1, 1]);
        let l = Layout::parse("2,1,3").unwrap();
        assert_eq!(l.hosts(), 3);
        l.check(6).unwrap();
        let hosts: Vec<u32> = (0..6).map(|r| l.host_of(r, 6)).collect();
        assert_eq!(hosts, [0, 0, 1, 2, 2, 2]);
        assert!(l
            .check(8)
            .unwrap_err()
            .to_string()
            .contains("places 6 ranks"));
        assert!(Layout::Blocks(3).check(2).is_err());
        assert!(Layout::parse("2,0")
            .unwrap_err()
            .to_string()
            .contains("at least one"));
        assert!(Layout::parse("x").is_err());
        // an empty count is no count
        assert!(Layout::parse("4,").is_err());
    }

    #[test]
    fn cpus_split_among_hosts() {
        assert_eq!(parse_cpu_list("0-3,8"), [0, 1, 2, 3, 8]);
        assert_eq!(parse_cpu_list(" 5 "), [5]);
        assert!(parse_cpu_list("").is_empty());
        assert_eq!(cpu_slices(&[0, 1], 2), Some(vec![vec![0], vec![1]]));
        assert_eq!(
            cpu_slices(&[0, 1, 2, 3, 4], 2),
            Some(vec![vec![0, 1], vec![2, 3, 4]])
        );
        assert_eq!(cpu_slices(&[0, 1], 3), None);
        assert!(!allowed_cpus().is_empty());
    }

    #[test]
    fn tags_and_owners() {
        assert!(check_tag("ht4711").is_ok());
        assert!(check_tag("Bad").is_err());
        assert!(check_tag("a-b").is_err());
        assert!(check_tag("").is_err());
        assert_eq!(owner_pid("ht4711"), Some(4711));
        assert_eq!(owner_pid("demo"), None);
        assert_eq!(owner_pid("4711"), None);
        assert_eq!(owner_pid("a1b2"), None);
        assert_eq!(host_index("hccl-ht1-h12", "ht1"), Some(12));
        assert_eq!(host_index("hccl-ht12-h1", "ht1"), None);
    }
}
