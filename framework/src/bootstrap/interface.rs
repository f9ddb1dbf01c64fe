//! `HCCL_SOCKET_IFNAME`: choosing the network interface by name.
//!
//! Syntax (as NCCL's and HCCL's): a comma-separated list of name prefixes
//! (`eth,enp`); `=` in front for exact names (`=eth0`); `^` in front to
//! exclude prefixes instead (`^docker,lo`). The first matching interface
//! with an address of the requested family (`HCCL_SOCKET_FAMILY`:
//! `AF_INET` default, or `AF_INET6`) wins.

use hccl_platform::{HcclError, Result};
use std::net::IpAddr;

/// Whether interface `name` is selected by `spec`.
pub(crate) fn matches(spec: &str, name: &str) -> bool {
    let spec = spec.trim();
    let (exclude, rest) = match spec.strip_prefix('^') {
        Some(r) => (true, r),
        None => (false, spec),
    };
    let (exact, rest) = match rest.strip_prefix('=') {
        Some(r) => (true, r),
        None => (false, rest),
    };
    let hit = rest
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .any(|p| {
            if exact {
                name == p
            } else {
                name.starts_with(p)
            }
        });
    hit != exclude
}

/// The first address of an interface selected by `spec`, of family v6 if `v6`.
pub(crate) fn address_of(spec: &str, v6: bool) -> Result<IpAddr> {
    let addrs =
        nix::ifaddrs::getifaddrs().map_err(|e| HcclError::syscall(format!("getifaddrs: {e}")))?;
    let mut seen = Vec::new();
    for a in addrs {
        let Some(sa) = a.address else { continue };
        let ip = if let Some(v4) = sa.as_sockaddr_in() {
            IpAddr::V4(v4.ip())
        } else if let Some(v6a) = sa.as_sockaddr_in6() {
            IpAddr::V6(v6a.ip())
        } else {
            continue;
        };
        seen.push(a.interface_name.clone());
        if ip.is_ipv6() == v6 && matches(spec, &a.interface_name) {
            return Ok(ip);
        }
    }
    seen.dedup();
    Err(HcclError::not_found(format!(
        "environment variable HCCL_SOCKET_IFNAME='{spec}' matches no interface with an {} address (interfaces: {})",
        if v6 { "IPv6" } else { "IPv4" },
        seen.join(", ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_syntax() {
        assert!(matches("eth,enp", "eth0"));
        assert!(matches("eth,enp", "enp3s0"));
        assert!(!matches("eth", "lo"));
        assert!(matches("=lo", "lo"));
        assert!(!matches("=eth", "eth0"));
        assert!(!matches("^docker,lo", "lo"));
        assert!(matches("^docker,lo", "eth0"));
    }

    #[test]
    fn loopback_is_found_and_missing_names_are_explained() {
        assert_eq!(
            address_of("=lo", false).unwrap(),
            "127.0.0.1".parse::<IpAddr>().unwrap()
        );
        let e = address_of("=nosuchif0", false).unwrap_err();
        assert!(
            e.to_string()
                .contains("HCCL_SOCKET_IFNAME='=nosuchif0' matches no interface"),
            "{e}"
        );
        assert!(e.to_string().contains("lo"), "{e}");
    }
}
