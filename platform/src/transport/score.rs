//! A component's score per level and message size (UCC's score map), and
//! the tune string that adjusts it.
//!
//! A [`ScoreMap`] is a list of ranges; where several cover one (level,
//! size), the last one added wins, so a tune string laid over the
//! defaults overrides them where it speaks and nowhere else. Score 0
//! means "never for this range".
//!
//! Tune strings (`HCCL_RS_TL_<NAME>_TUNE`, in the style of UCC's
//! `UCC_TL_<NAME>_TUNE`): tokens separated by `#`, each a `:`-separated
//! list of a level (`level0` = on one host, `level1` = across hosts;
//! omitted = both), a message range (`0-4K`, `64K-inf`; sizes in bytes
//! with K, M, G suffixes; the upper end excluded; omitted = every size)
//! and a score (a number or `inf`; required). Example:
//! `level1:0-64K:5#level1:64K-inf:100` makes a component the last choice
//! for small messages between hosts and the first for large ones.

use super::Level;
use crate::error::{HcclError, Result};

/// The highest score (`inf` in tune strings).
pub const SCORE_INF: u32 = u32::MAX;

/// One range of a score map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScoreRange {
    /// The level it applies to (`None` = both).
    pub level: Option<Level>,
    /// First message size it covers, bytes.
    pub lo: u64,
    /// First size it no longer covers (`u64::MAX` = no end).
    pub hi: u64,
    /// The score.
    pub score: u32,
}

impl ScoreRange {
    fn covers(&self, level: Level, bytes: u64) -> bool {
        self.level.is_none_or(|l| l == level) && bytes >= self.lo && bytes < self.hi
    }
}

/// Scores by level and message size.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScoreMap {
    ranges: Vec<ScoreRange>,
}

impl ScoreMap {
    /// `score` at every level and size.
    pub fn uniform(score: u32) -> ScoreMap {
        ScoreMap::default().with(None, 0, u64::MAX, score)
    }

    /// This map with `score` over `[lo, hi)` at `level` (both if `None`),
    /// overriding what was there.
    pub fn with(mut self, level: Option<Level>, lo: u64, hi: u64, score: u32) -> ScoreMap {
        self.ranges.push(ScoreRange {
            level,
            lo,
            hi,
            score,
        });
        self
    }

    /// The score at `level` for a message of `bytes` (0 where no range
    /// covers it).
    pub fn score(&self, level: Level, bytes: u64) -> u32 {
        self.ranges
            .iter()
            .rev()
            .find(|r| r.covers(level, bytes))
            .map_or(0, |r| r.score)
    }

    /// The ranges, in the order they apply (later ones win).
    pub fn ranges(&self) -> &[ScoreRange] {
        &self.ranges
    }

    /// Lays the tune string `spec` over this map (see the module docs).
    /// `what` names the variable in errors.
    pub fn tune(&mut self, spec: &str, what: &str) -> Result<()> {
        let bad = |token: &str, why: &str| {
            HcclError::para(format!("{what}: bad token '{token}' in '{spec}': {why}"))
        };
        let mut parsed = Vec::new();
        for token in spec.split('#').map(str::trim).filter(|t| !t.is_empty()) {
            let mut range = ScoreRange {
                level: None,
                lo: 0,
                hi: u64::MAX,
                score: 0,
            };
            let mut scored = false;
            for field in token.split(':').map(str::trim) {
                let f = field.to_ascii_lowercase();
                if f == "level0" || f == "intra" {
                    range.level = Some(Level::Intra);
                } else if f == "level1" || f == "inter" {
                    range.level = Some(Level::Inter);
                } else if let Some((lo, hi)) = f.split_once('-') {
                    range.lo = parse_size(lo).map_err(|why| bad(token, &why))?;
                    range.hi = parse_size(hi).map_err(|why| bad(token, &why))?;
                    if range.lo >= range.hi {
                        return Err(bad(token, "the range is empty"));
                    }
                } else if f == "inf" {
                    range.score = SCORE_INF;
                    scored = true;
                } else if let Ok(s) = f.parse::<u32>() {
                    range.score = s;
                    scored = true;
                } else {
                    return Err(bad(
                        token,
                        &format!(
                            "'{field}' is not a level (level0, level1), a range (0-4K) or a score"
                        ),
                    ));
                }
            }
            if !scored {
                return Err(bad(token, "no score"));
            }
            parsed.push(range);
        }
        self.ranges.extend(parsed);
        Ok(())
    }
}

/// A size with an optional K/M/G suffix (powers of 1024), or `inf`.
fn parse_size(s: &str) -> std::result::Result<u64, String> {
    let s = s.trim();
    if s == "inf" {
        return Ok(u64::MAX);
    }
    let (num, mult) = match s.char_indices().last() {
        Some((i, 'k')) => (&s[..i], 1u64 << 10),
        Some((i, 'm')) => (&s[..i], 1 << 20),
        Some((i, 'g')) => (&s[..i], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("'{s}' is not a size (bytes, K, M, G or inf)"))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn later_ranges_win_where_they_speak() {
        let mut m = ScoreMap::uniform(10);
        m.tune("level1:0-64K:5#level1:64K-inf:100", "T").unwrap();
        assert_eq!(m.score(Level::Intra, 8), 10);
        assert_eq!(m.score(Level::Intra, 1 << 30), 10);
        assert_eq!(m.score(Level::Inter, 8), 5);
        assert_eq!(m.score(Level::Inter, 65535), 5);
        assert_eq!(m.score(Level::Inter, 65536), 100);
        m.tune("inf", "T").unwrap();
        assert_eq!(m.score(Level::Inter, 8), SCORE_INF);
        m.tune("level0:0", "T").unwrap();
        assert_eq!(m.score(Level::Intra, 8), 0);
        assert_eq!(ScoreMap::default().score(Level::Intra, 8), 0);
    }

    #[test]
    fn bad_tune_strings_say_what_is_wrong() {
        let mut m = ScoreMap::uniform(1);
        let e = m.tune("level1:4K-1K:3", "HCCL_RS_TL_TCP_TUNE").unwrap_err();
        assert!(e.message().contains("HCCL_RS_TL_TCP_TUNE"), "{e}");
        assert!(e.message().contains("the range is empty"), "{e}");
        let e = m.tune("level1:0-4K", "T").unwrap_err();
        assert!(e.message().contains("no score"), "{e}");
        let e = m.tune("level7:1", "T").unwrap_err();
        assert!(e.message().contains("'level7' is not a level"), "{e}");
        let e = m.tune("0-4Q:1", "T").unwrap_err();
        assert!(e.message().contains("is not a size"), "{e}");
        // nothing of a refused string is applied
        assert_eq!(m.ranges().len(), 1);
    }

    proptest! {
        #[test]
        fn fuzz_tune_string(spec in "[a-z0-9:#\\-KMG ]{0,40}") {
            let mut m = ScoreMap::uniform(1);
            let before = m.ranges().len();
            match m.tune(&spec, "T") {
                Ok(()) => prop_assert!(m.ranges().len() >= before),
                Err(e) => prop_assert!(e.message().contains("T: bad token")),
            }
        }
    }
}
