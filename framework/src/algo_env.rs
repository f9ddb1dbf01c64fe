//! `HCCL_ALGO`: the user's choice of algorithm per level, globally or per op.
//!
//! Forms (HCCL's): `level0:NA;level1:ring` for every op, or per op
//! `allreduce=level0:NA;level1:H-D_R/allgather=level0:NA;level1:NB`.
//! `NA` means "let hccl-rs choose".

use hccl_platform::{HcclError, Result};
use std::collections::BTreeMap;

/// Algorithm names HCCL_ALGO accepts on level 0.
pub(crate) const LEVEL0_NAMES: &[&str] = &[
    "NA",
    "ring",
    "fullmesh",
    "mesh",
    "star",
    "pairwise",
    "NHR",
    "NHR_V1",
    "NB",
    "multiring",
];
/// Algorithm names HCCL_ALGO accepts on level 1.
pub(crate) const LEVEL1_NAMES: &[&str] = &[
    "NA",
    "ring",
    "H-D_R",
    "NHR",
    "NHR_V1",
    "NB",
    "AHC",
    "pipeline",
    "pairwise",
    "fullmesh",
    "multiring",
];
/// Op names HCCL_ALGO accepts.
pub(crate) const OP_NAMES: &[&str] = &[
    "allreduce",
    "allgather",
    "reducescatter",
    "broadcast",
    "reduce",
    "scatter",
    "gather",
    "alltoall",
    "alltoallv",
    "alltoallvc",
    "allgatherv",
    "reducescatterv",
    "send",
    "receive",
];

/// The algorithm asked for on each level (`None` = NA, automatic).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LevelAlgos {
    /// Intra-server.
    pub level0: Option<String>,
    /// Inter-server.
    pub level1: Option<String>,
}

/// Parsed `HCCL_ALGO`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AlgoConfig {
    /// Applies to ops without their own entry.
    pub all: Option<LevelAlgos>,
    /// Per op name (`allreduce`, ...).
    pub per_op: BTreeMap<String, LevelAlgos>,
}

fn bad(value: &str, why: String) -> HcclError {
    HcclError::para(format!(
        "environment variable HCCL_ALGO='{value}' is invalid: {why}"
    ))
}

fn parse_levels(full: &str, text: &str) -> Result<LevelAlgos> {
    let mut out = LevelAlgos::default();
    for part in text.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let (level, algo) = part.split_once(':').ok_or_else(|| {
            bad(
                full,
                format!("'{part}' should look like level0:NA or level1:ring"),
            )
        })?;
        let (names, slot) = match level.trim() {
            "level0" => (LEVEL0_NAMES, &mut out.level0),
            "level1" => (LEVEL1_NAMES, &mut out.level1),
            "level2" | "level3" => continue,
            other => {
                return Err(bad(
                    full,
                    format!("unknown level '{other}' (expected level0 or level1)"),
                ))
            }
        };
        let algo = algo.trim();
        let name = names
            .iter()
            .find(|n| n.eq_ignore_ascii_case(algo))
            .ok_or_else(|| {
                bad(
                    full,
                    format!(
                        "unknown {level} algorithm '{algo}' (expected one of {})",
                        names.join(", ")
                    ),
                )
            })?;
        *slot = (*name != "NA").then(|| name.to_string());
    }
    Ok(out)
}

impl AlgoConfig {
    /// Parses an `HCCL_ALGO` value.
    pub fn parse(value: &str) -> Result<AlgoConfig> {
        let mut cfg = AlgoConfig::default();
        let v = value.trim();
        if v.is_empty() {
            return Ok(cfg);
        }
        if !v.contains('=') {
            cfg.all = Some(parse_levels(value, v)?);
            return Ok(cfg);
        }
        for entry in v.split('/').map(str::trim).filter(|e| !e.is_empty()) {
            let (op, levels) = entry.split_once('=').ok_or_else(|| {
                bad(
                    value,
                    format!("'{entry}' should look like allreduce=level0:NA;level1:ring"),
                )
            })?;
            let op = op.trim().to_ascii_lowercase();
            if !OP_NAMES.contains(&op.as_str()) {
                return Err(bad(
                    value,
                    format!(
                        "unknown op '{op}' (expected one of {})",
                        OP_NAMES.join(", ")
                    ),
                ));
            }
            cfg.per_op.insert(op, parse_levels(value, levels)?);
        }
        Ok(cfg)
    }

    /// The entry for `op` (its own, else the global one).
    pub fn for_op(&self, op: &str) -> Option<&LevelAlgos> {
        self.per_op.get(op).or(self.all.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hccl_forms() {
        let c = AlgoConfig::parse("level0:NA;level1:ring").unwrap();
        assert_eq!(
            c.for_op("allreduce").unwrap().level1.as_deref(),
            Some("ring")
        );
        assert_eq!(c.for_op("allreduce").unwrap().level0, None);
        let c = AlgoConfig::parse("allreduce=level0:NA;level1:H-D_R/allgather=level0:NA;level1:NB")
            .unwrap();
        assert_eq!(
            c.for_op("allreduce").unwrap().level1.as_deref(),
            Some("H-D_R")
        );
        assert_eq!(c.for_op("allgather").unwrap().level1.as_deref(), Some("NB"));
        assert!(c.for_op("broadcast").is_none());
    }

    #[test]
    fn bad_values_name_the_variable_and_token() {
        for (v, needle) in [
            ("level1:warp", "unknown level1 algorithm 'warp'"),
            ("level7:ring", "unknown level 'level7'"),
            ("level1ring", "should look like level0:NA"),
            ("allreduc=level1:ring", "unknown op 'allreduc'"),
        ] {
            let e = AlgoConfig::parse(v).unwrap_err();
            assert!(e.to_string().contains(&format!("HCCL_ALGO='{v}'")), "{e}");
            assert!(e.to_string().contains(needle), "{e}");
        }
    }
}

/// Fuzz target of `HCCL_ALGO`: values assembled from the syntax's own
/// tokens (levels, names in any case, ops, separators, blanks) and junk.
#[cfg(test)]
mod fuzz {
    use super::*;
    use crate::bootstrap::fuzz::{bounded, config, text};
    use proptest::prelude::*;

    fn token() -> impl Strategy<Value = String> {
        let names: Vec<&'static str> = LEVEL0_NAMES
            .iter()
            .chain(LEVEL1_NAMES)
            .chain(OP_NAMES)
            .copied()
            .collect();
        prop_oneof![
            6 => proptest::sample::select(names).prop_flat_map(|n| {
                // the same name in upper, lower or its own case
                prop_oneof![
                    Just(n.to_string()),
                    Just(n.to_ascii_uppercase()),
                    Just(n.to_ascii_lowercase()),
                ]
            }),
            4 => proptest::sample::select(vec!["level0", "level1", "level2", "level3", "level9"])
                .prop_map(String::from),
            6 => proptest::sample::select(vec![":", ";", "=", "/", " ", "\t", ""]).prop_map(String::from),
            1 => text(),
        ]
    }

    fn value() -> impl Strategy<Value = String> {
        prop_oneof![
            6 => proptest::collection::vec(token(), 0..16).prop_map(|t| t.concat()),
            1 => text(),
        ]
    }

    /// A valid value and the configuration it stands for.
    fn valid() -> impl Strategy<Value = (String, AlgoConfig)> {
        let levels = (
            proptest::option::of(proptest::sample::select(LEVEL0_NAMES)),
            proptest::option::of(proptest::sample::select(LEVEL1_NAMES)),
        );
        let per_op = proptest::collection::btree_map(
            proptest::sample::select(OP_NAMES),
            levels.clone(),
            0..4,
        );
        (proptest::option::of(levels), per_op).prop_map(|(all, per_op)| {
            let text = |(l0, l1): (Option<&str>, Option<&str>)| {
                let mut parts = Vec::new();
                if let Some(n) = l0 {
                    parts.push(format!("level0:{n}"));
                }
                if let Some(n) = l1 {
                    parts.push(format!("level1:{n}"));
                }
                parts.join(";")
            };
            let algos = |(l0, l1): (Option<&str>, Option<&str>)| LevelAlgos {
                level0: l0.filter(|n| *n != "NA").map(String::from),
                level1: l1.filter(|n| *n != "NA").map(String::from),
            };
            if per_op.is_empty() {
                let all = all.unwrap_or((None, None));
                let cfg = AlgoConfig {
                    all: Some(algos(all)).filter(|_| !text(all).is_empty()),
                    per_op: BTreeMap::new(),
                };
                (text(all), cfg)
            } else {
                let v: Vec<String> = per_op
                    .iter()
                    .map(|(op, l)| format!("{op}={}", text(*l)))
                    .collect();
                let cfg = AlgoConfig {
                    all: None,
                    per_op: per_op
                        .into_iter()
                        .map(|(op, l)| (op.to_string(), algos(l)))
                        .collect(),
                };
                (v.join("/"), cfg)
            }
        })
    }

    proptest! {
        #![proptest_config(config())]

        /// Any value parses or is a parameter error naming the variable
        /// and the value; what parses names only known ops and algorithms
        /// (in their canonical spelling), never `NA`.
        #[test]
        fn fuzz_hccl_algo(v in value()) {
            match bounded("HCCL_ALGO parse", || AlgoConfig::parse(&v)) {
                Ok(c) => {
                    let levels = c.all.iter().chain(c.per_op.values());
                    for l in levels {
                        if let Some(n) = &l.level0 {
                            prop_assert!(n != "NA" && LEVEL0_NAMES.contains(&n.as_str()), "{}", n);
                        }
                        if let Some(n) = &l.level1 {
                            prop_assert!(n != "NA" && LEVEL1_NAMES.contains(&n.as_str()), "{}", n);
                        }
                    }
                    prop_assert!(c.per_op.keys().all(|op| OP_NAMES.contains(&op.as_str())));
                }
                Err(e) => {
                    prop_assert_eq!(e.code(), hccl_platform::HcclResult::EPara);
                    let named = format!("HCCL_ALGO='{v}'");
                    prop_assert!(e.to_string().contains(&named), "{}", e);
                }
            }
        }

        /// Every valid value parses to the configuration it spells.
        #[test]
        fn fuzz_hccl_algo_valid((v, want) in valid()) {
            prop_assert_eq!(AlgoConfig::parse(&v).unwrap(), want, "{}", v);
        }
    }
}
