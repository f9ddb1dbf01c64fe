//! Which component carries a link: the user's order and the scores.
//!
//! `HCCL_RS_TRANSPORT` is `auto` (the default: every registered
//! component that both ends opened and that can reach the peer competes,
//! the highest score at the link's level and the op's size wins, ties
//! going to the earlier component in the registry) or a comma-separated
//! list (`shm,ibverbs,tcp`): only the listed components are opened, and
//! for each peer the first of the list that can reach it carries the link
//! (NCCL's transport table: the first whose `canConnect` says yes). In
//! both, a score of 0 for the link's level and size rules a component out.

use crate::error::{HcclError, Result};

/// The user's transport order (`HCCL_RS_TRANSPORT`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum TransportOrder {
    /// Every registered component, ranked by score.
    #[default]
    Auto,
    /// Only these, first that can reach a peer wins.
    List(Vec<String>),
}

impl TransportOrder {
    /// Parses `HCCL_RS_TRANSPORT`'s value; `known` are the registered
    /// components' names (a name not among them is an error listing them).
    pub fn parse(value: &str, known: &[&str]) -> Result<TransportOrder> {
        let v = value.trim().to_ascii_lowercase();
        if v.is_empty() || v == "auto" {
            return Ok(TransportOrder::Auto);
        }
        let mut list = Vec::new();
        for name in v.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            if !known.contains(&name) {
                return Err(HcclError::para(format!(
                    "HCCL_RS_TRANSPORT='{value}': no transport '{name}' (registered: {}, or auto)",
                    known.join(", ")
                )));
            }
            if list.iter().any(|n: &String| n == name) {
                return Err(HcclError::para(format!(
                    "HCCL_RS_TRANSPORT='{value}': '{name}' is listed twice"
                )));
            }
            list.push(name.to_owned());
        }
        if list.is_empty() {
            return Err(HcclError::para(format!(
                "HCCL_RS_TRANSPORT='{value}' lists no transport"
            )));
        }
        Ok(TransportOrder::List(list))
    }

    /// Whether the component `name` takes part at all.
    pub fn allows(&self, name: &str) -> bool {
        match self {
            TransportOrder::Auto => true,
            TransportOrder::List(l) => l.iter().any(|n| n == name),
        }
    }

    /// Whether the user asked for `name` by name (so failing to open it is
    /// an error, not a silent fallback).
    pub fn is_explicit(&self, name: &str) -> bool {
        matches!(self, TransportOrder::List(l) if l.iter().any(|n| n == name))
    }
}

/// Picks the component for one link. `candidates` are the components
/// that can reach the peer, in registry order, with their score at the
/// link's level and the op's size.
pub fn choose<'a>(order: &TransportOrder, candidates: &[(&'a str, u32)]) -> Option<&'a str> {
    let usable = candidates.iter().filter(|(_, s)| *s > 0);
    match order {
        TransportOrder::Auto => usable
            // max_by_key keeps the last of equals: reverse so ties go to
            // the earlier component
            .rev()
            .max_by_key(|(_, s)| *s)
            .map(|(n, _)| *n),
        TransportOrder::List(list) => list
            .iter()
            .find_map(|want| usable.clone().find(|(n, _)| n == want))
            .map(|(n, _)| *n),
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    const KNOWN: &[&str] = &["in-process", "shm", "ibverbs", "tcp"];

    #[test]
    fn auto_takes_the_highest_score_and_ties_go_first() {
        let auto = TransportOrder::Auto;
        assert_eq!(choose(&auto, &[("shm", 50), ("tcp", 10)]), Some("shm"));
        assert_eq!(
            choose(&auto, &[("shm", 50), ("mine", 70), ("tcp", 10)]),
            Some("mine")
        );
        assert_eq!(choose(&auto, &[("a", 5), ("b", 5)]), Some("a"));
        assert_eq!(choose(&auto, &[("a", 0), ("b", 1)]), Some("b"));
        assert_eq!(choose(&auto, &[("a", 0)]), None);
        assert_eq!(choose(&auto, &[]), None);
    }

    #[test]
    fn a_list_is_an_order_of_preference() {
        let o = TransportOrder::parse("tcp, shm", KNOWN).unwrap();
        assert_eq!(o, TransportOrder::List(vec!["tcp".into(), "shm".into()]));
        assert_eq!(choose(&o, &[("shm", 50), ("tcp", 10)]), Some("tcp"));
        assert_eq!(choose(&o, &[("shm", 50)]), Some("shm"));
        assert_eq!(choose(&o, &[("ibverbs", 30)]), None);
        // a score of 0 rules a listed component out for that range
        assert_eq!(choose(&o, &[("shm", 50), ("tcp", 0)]), Some("shm"));
        assert!(o.allows("tcp") && !o.allows("ibverbs"));
        assert!(o.is_explicit("shm") && !TransportOrder::Auto.is_explicit("shm"));
    }

    #[test]
    fn bad_orders_are_refused_by_name() {
        assert_eq!(
            TransportOrder::parse(" AUTO ", KNOWN).unwrap(),
            TransportOrder::Auto
        );
        assert_eq!(
            TransportOrder::parse("", KNOWN).unwrap(),
            TransportOrder::Auto
        );
        let e = TransportOrder::parse("shm,rdma", KNOWN).unwrap_err();
        assert!(e.message().contains("no transport 'rdma'"), "{e}");
        assert!(e.message().contains("in-process, shm, ibverbs, tcp"), "{e}");
        let e = TransportOrder::parse("tcp,tcp", KNOWN).unwrap_err();
        assert!(e.message().contains("listed twice"), "{e}");
        let e = TransportOrder::parse(",", KNOWN).unwrap_err();
        assert!(e.message().contains("lists no transport"), "{e}");
    }
}
