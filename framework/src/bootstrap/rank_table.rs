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
use std::collections::BTreeMap;
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
    // By rank id, in a map: a rank id is a number from the file, and
    // sizing a vector by it would let `"rank_id": "4294967295"` allocate
    // hundreds of gigabytes before the contiguity check could object.
    let mut ranks: BTreeMap<u32, RankInfo> = BTreeMap::new();
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
                // in u32: `rank as u16` would wrap rank 65536 onto the base port
                None => u32::from(base_port)
                    .checked_add(rank)
                    .and_then(|p| u16::try_from(p).ok())
                    .ok_or_else(|| {
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
            if ranks.contains_key(&rank) {
                return Err(bad(
                    &format!("{at}.rank_id"),
                    format!("rank {rank} appears twice"),
                ));
            }
            ranks.insert(
                rank,
                RankInfo {
                    rank,
                    host_id: server_id.clone(),
                    link_addr: SocketAddr::new(ip, port),
                    buffer_size,
                    transports: Vec::new(),
                },
            );
        }
    }
    if ranks.is_empty() {
        return Err(bad("server_list", "lists no device".into()));
    }
    // contiguous from 0: the i-th smallest id must be i (the first that is
    // not names the missing rank)
    if let Some(r) = ranks
        .keys()
        .zip(0u32..)
        .find_map(|(&id, i)| (id != i).then_some(i))
    {
        return Err(bad(
            "rank_id",
            format!("rank {r} is missing: rank ids must be contiguous from 0"),
        ));
    }
    let ranks: Vec<RankInfo> = ranks.into_values().collect();
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

/// Fuzz target of the rank table: JSON shaped like a real table with any
/// value in any field, mutated tables, and arbitrary text.
#[cfg(test)]
mod fuzz {
    use super::*;
    use crate::bootstrap::fuzz::{bounded, config, ip, small_or_any_u32, text};
    use proptest::prelude::*;
    use serde_json::json;

    /// A field's value: usually a string of the right shape, sometimes a
    /// string of the wrong one, another JSON type, or missing.
    fn field(right: BoxedStrategy<String>) -> impl Strategy<Value = Option<Value>> {
        prop_oneof![
            24 => right.prop_map(|s| Some(Value::String(s))),
            2 => text().prop_map(|s| Some(Value::String(s))),
            1 => any::<i64>().prop_map(|n| Some(json!(n))),
            1 => Just(Some(Value::Null)),
            1 => Just(Some(json!([]))),
            1 => Just(None),
        ]
    }

    fn rank_id() -> BoxedStrategy<String> {
        prop_oneof![
            12 => small_or_any_u32(6).prop_map(|r| r.to_string()),
            1 => Just("4294967296".to_string()),
            1 => Just("-1".to_string()),
            1 => Just("99999999999999999999".to_string()),
        ]
        .boxed()
    }

    fn port() -> BoxedStrategy<String> {
        prop_oneof![
            8 => any::<u16>().prop_map(|p| p.to_string()),
            1 => Just("65536".to_string()),
            1 => Just("70000".to_string()),
        ]
        .boxed()
    }

    fn object(fields: Vec<(&'static str, Option<Value>)>) -> Value {
        Value::Object(
            fields
                .into_iter()
                .filter_map(|(k, v)| v.map(|v| (k.to_string(), v)))
                .collect(),
        )
    }

    fn device() -> impl Strategy<Value = Value> {
        (
            field(rank_id()),
            field(ip().prop_map(|i| i.to_string()).boxed()),
            field(port()),
            field(rank_id()),
        )
            .prop_map(|(rank, ip, port, dev)| {
                object(vec![
                    ("rank_id", rank),
                    ("device_ip", ip),
                    ("device_port", port),
                    ("device_id", dev),
                ])
            })
    }

    fn server() -> impl Strategy<Value = Value> {
        (
            field("node_[0-9]".prop_map(String::from).boxed()),
            prop_oneof![
                8 => proptest::collection::vec(device(), 0..5).prop_map(|d| Some(Value::Array(d))),
                1 => Just(Some(json!("device"))),
                1 => Just(None),
            ],
        )
            .prop_map(|(id, devices)| object(vec![("server_id", id), ("device", devices)]))
    }

    /// Tables: the right shape with any field wrong, plus a few edits to
    /// their text, plus arbitrary text.
    fn table_text() -> impl Strategy<Value = String> {
        let shaped = (
            field(prop_oneof![8 => Just("1.0".to_string()), 1 => text()].boxed()),
            field((0usize..6).prop_map(|n| n.to_string()).boxed()),
            prop_oneof![
                8 => proptest::collection::vec(server(), 0..4).prop_map(|s| Some(Value::Array(s))),
                1 => Just(Some(json!({}))),
                1 => Just(None),
            ],
        )
            .prop_map(|(version, count, servers)| {
                object(vec![
                    ("status", Some(json!("completed"))),
                    ("version", version),
                    ("server_count", count),
                    ("server_list", servers),
                ])
                .to_string()
            })
            .boxed();
        prop_oneof![
            5 => shaped.clone(),
            2 => (shaped, proptest::collection::vec((any::<usize>(), any::<char>()), 1..4)).prop_map(
                |(s, edits)| {
                    let mut c: Vec<char> = s.chars().collect();
                    for (at, ch) in edits {
                        let n = c.len();
                        c[at % n] = ch;
                    }
                    c.into_iter().collect()
                }
            ),
            1 => text(),
            // deep nesting: serde_json refuses beyond its recursion limit
            1 => (1usize..4000).prop_map(|n| "[".repeat(n) + &"]".repeat(n)),
        ]
    }

    proptest! {
        #![proptest_config(config())]

        /// Any text is a table or a parameter error naming the file; a
        /// table lists ranks 0..n, each once, at most one per device.
        #[test]
        fn fuzz_rank_table(t in table_text(), base_port in any::<u16>()) {
            let devices = t.matches("rank_id").count();
            match bounded("rank table parse", || parse("f.json", &t, base_port, 1 << 20)) {
                Ok(table) => {
                    prop_assert!(!table.ranks.is_empty() && table.ranks.len() <= devices);
                    prop_assert!(table.ranks.iter().enumerate().all(|(i, r)| r.rank == i as u32));
                }
                Err(e) => {
                    prop_assert_eq!(e.code(), hccl_platform::HcclResult::EPara);
                    prop_assert!(e.to_string().contains("rank table f.json"), "{}", e);
                }
            }
        }
    }

    /// The port of a device without `device_port` is the base port plus
    /// its rank, or an error when that passes 65535 — never wrapped.
    #[test]
    fn default_ports_never_wrap() {
        let t = |rank: u32| {
            format!(
                r#"{{"version": "1.0", "server_list": [{{"server_id": "a", "device": [
                {{"device_ip": "127.0.0.1", "rank_id": "{rank}"}}]}}]}}"#
            )
        };
        let e = parse("f.json", &t(65536), 60000, 1).unwrap_err();
        assert!(e.to_string().contains("overflows"), "{e}");
        let e = parse("f.json", &t(5536), 60000, 1).unwrap_err();
        assert!(e.to_string().contains("overflows"), "{e}");
        assert_eq!(
            parse("f.json", &t(0), 65535, 1).unwrap().ranks[0]
                .link_addr
                .port(),
            65535
        );
        // a huge rank id is an error, not a huge table
        let huge = t(u32::MAX).replace(r#""rank_id""#, r#""device_port": "1", "rank_id""#);
        let e = parse("f.json", &huge, 0, 1).unwrap_err();
        assert!(e.to_string().contains("rank 0 is missing"), "{e}");
    }
}
