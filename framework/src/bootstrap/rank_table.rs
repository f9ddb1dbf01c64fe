//! HCCL's rank table (JSON, version 1.0) for `HcclCommInitClusterInfo`.
//!
//! ```json
//! {"status": "completed", "version": "1.0", "server_count": "2",
//!  "server_list": [{"server_id": "node_0",
//!    "device": [{"device_id": "0", "device_ip": "192.168.1.8", "device_port": "16667", "rank_id": "0"}]}]}
//! ```
//! All values are strings. hccl-rs uses `device_ip` and `device_port` as the
//! rank's link listener (the port defaults to `HCCL_IF_BASE_PORT` + rank) and
//! `server_id` as the host identity. Errors name the file, the field and the
//! problem.

use super::{derived_unique_id, RankInfo, RankTable};
use hccl_platform::{HcclError, Result};
use serde_json::Value;
use std::net::{IpAddr, SocketAddr};

/// Reads and checks the rank table at `path`. `base_port` gives ports to
/// devices without `device_port`; `buffer_size` is every rank's CCL size.
pub(crate) fn load(path: &str, base_port: u16, buffer_size: u64) -> Result<RankTable> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| HcclError::open_file(format!("rank table {path}: cannot read: {e}")))?;
    parse(path, &text, base_port, buffer_size)
}

/// Parses rank table `text` (named `path` in errors).
pub(crate) fn parse(path: &str, text: &str, base_port: u16, buffer_size: u64) -> Result<RankTable> {
    let bad = |field: &str, why: String| {
        HcclError::para(format!("rank table {path}: field '{field}': {why}"))
    };
    let v: Value = serde_json::from_str(text)
        .map_err(|e| HcclError::para(format!("rank table {path}: not valid JSON: {e}")))?;
    let s = |v: &Value, field: &str| -> Result<String> {
        match v.get(field) {
            Some(Value::String(s)) => Ok(s.clone()),
            Some(other) => Err(bad(field, format!("expected a string, found {other}"))),
            None => Err(bad(field, "missing".into())),
        }
    };
    let version = s(&v, "version")?;
    if version != "1.0" {
        return Err(bad(
            "version",
            format!("'{version}' is not supported (expected \"1.0\")"),
        ));
    }
    let servers = v
        .get("server_list")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("server_list", "missing or not an array".into()))?;
    if let Ok(count) = s(&v, "server_count") {
        if count.parse::<usize>().ok() != Some(servers.len()) {
            return Err(bad(
                "server_count",
                format!("says {count} but server_list has {} entries", servers.len()),
            ));
        }
    }
    let mut ranks: Vec<Option<RankInfo>> = Vec::new();
    for (si, server) in servers.iter().enumerate() {
        let server_id =
            s(server, "server_id").map_err(|e| e.during(format!("server_list[{si}]")))?;
        let devices = server
            .get("device")
            .and_then(Value::as_array)
            .ok_or_else(|| {
                bad(
                    &format!("server_list[{si}].device"),
                    "missing or not an array".into(),
                )
            })?;
        for (di, d) in devices.iter().enumerate() {
            let at = format!("server_list[{si}].device[{di}]");
            let rank_s = s(d, "rank_id").map_err(|e| e.during(&at))?;
            let rank: u32 = rank_s.parse().map_err(|_| {
                bad(
                    &format!("{at}.rank_id"),
                    format!("'{rank_s}' is not a rank number"),
                )
            })?;
            let ip_s = s(d, "device_ip").map_err(|e| e.during(&at))?;
            let ip: IpAddr = ip_s.parse().map_err(|_| {
                bad(
                    &format!("{at}.device_ip"),
                    format!("'{ip_s}' is not an IP address"),
                )
            })?;
            let port = match d.get("device_port") {
                None => base_port.checked_add(rank as u16).ok_or_else(|| {
                    bad(
                        &format!("{at}.device_port"),
                        "HCCL_IF_BASE_PORT + rank overflows".into(),
                    )
                })?,
                Some(_) => {
                    let p = s(d, "device_port")?;
                    p.parse().map_err(|_| {
                        bad(
                            &format!("{at}.device_port"),
                            format!("'{p}' is not a port number"),
                        )
                    })?
                }
            };
            if ranks.len() <= rank as usize {
                ranks.resize(rank as usize + 1, None);
            }
            if ranks[rank as usize].is_some() {
                return Err(bad(
                    &format!("{at}.rank_id"),
                    format!("rank {rank} appears twice"),
                ));
            }
            ranks[rank as usize] = Some(RankInfo {
                rank,
                host_id: server_id.clone(),
                link_addr: SocketAddr::new(ip, port),
                buffer_size,
                shm: None,
            });
        }
    }
    if ranks.is_empty() {
        return Err(bad("server_list", "lists no device".into()));
    }
    let ranks: Vec<RankInfo> = ranks
        .into_iter()
        .enumerate()
        .map(|(r, i)| {
            i.ok_or_else(|| {
                bad(
                    "rank_id",
                    format!("rank {r} is missing: rank ids must be contiguous from 0"),
                )
            })
        })
        .collect::<Result<_>>()?;
    Ok(RankTable {
        unique_id: derived_unique_id(text),
        ranks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{"status": "completed", "version": "1.0", "server_count": "2",
      "server_list": [
        {"server_id": "node_0", "device": [
          {"device_id": "0", "device_ip": "127.0.0.1", "device_port": "16667", "rank_id": "0"},
          {"device_id": "1", "device_ip": "127.0.0.1", "rank_id": "1"}]},
        {"server_id": "node_1", "device": [
          {"device_id": "0", "device_ip": "127.0.0.2", "device_port": "16668", "rank_id": "2"}]}]}"#;

    #[test]
    fn parses_hccl_v1() {
        let t = parse("t.json", GOOD, 60000, 1 << 20).unwrap();
        assert_eq!(t.ranks.len(), 3);
        assert_eq!(t.ranks[0].link_addr, "127.0.0.1:16667".parse().unwrap());
        assert_eq!(t.ranks[1].link_addr, "127.0.0.1:60001".parse().unwrap());
        assert_eq!(t.rank_to_server(), vec![0, 0, 1]);
        assert_eq!(
            t.unique_id,
            parse("other.json", GOOD, 60000, 1 << 20).unwrap().unique_id
        );
    }

    #[test]
    fn errors_name_file_field_and_problem() {
        let cases = [
            (
                GOOD.replace("\"1.0\"", "\"2.0\""),
                "field 'version': '2.0' is not supported",
            ),
            (
                GOOD.replace("\"rank_id\": \"2\"", "\"rank_id\": \"x\""),
                "field 'server_list[1].device[0].rank_id': 'x' is not a rank number",
            ),
            (
                GOOD.replace("\"rank_id\": \"2\"", "\"rank_id\": \"1\""),
                "rank 1 appears twice",
            ),
            (
                GOOD.replace("\"rank_id\": \"2\"", "\"rank_id\": \"5\""),
                "rank 2 is missing",
            ),
            (
                GOOD.replace("127.0.0.2", "not-an-ip"),
                "'not-an-ip' is not an IP address",
            ),
            (
                GOOD.replace("\"server_count\": \"2\"", "\"server_count\": \"3\""),
                "says 3 but server_list has 2",
            ),
            (
                GOOD.replace("\"rank_id\": \"0\"", "\"rank_id\": 0"),
                "expected a string, found 0",
            ),
            ("{ nope".to_string(), "not valid JSON"),
        ];
        for (text, needle) in cases {
            let e = parse("cluster.json", &text, 60000, 1).unwrap_err();
            let msg = e.to_string();
            assert!(msg.contains("rank table cluster.json"), "{msg}");
            assert!(msg.contains(needle), "'{needle}' missing from: {msg}");
        }
        let e = load("/nonexistent/rt.json", 60000, 1).unwrap_err();
        assert_eq!(e.code(), hccl_platform::HcclResult::EOpenFileFailure);
        assert!(e.to_string().contains("/nonexistent/rt.json"), "{e}");
    }
}
