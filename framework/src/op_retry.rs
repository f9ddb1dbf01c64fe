//! HCCL's op retry: when a link fails during an op while every process
//! lives on, the whole op runs again once the ranks have rebuilt their
//! links — if every rank stopped in the same op and its input is
//! untouched (HCCL's conditions: not in place, not captured in a graph).
//!
//! The settings are HCCL's: `HCCL_OP_RETRY_ENABLE` (`"L0:0,L1:1,L2:1"`:
//! per level — links within a host, between hosts, between super nodes,
//! of which this library has the first two), `HCCL_OP_RETRY_PARAMS`
//! (`"MaxCnt:3,HoldTime:5000,IntervalTime:1000"`), overridden per
//! communicator by the config fields `hcclRetryEnable` and
//! `hcclRetryParams`. The adapter runs the retry (`adapter/src/comm/retry.rs`);
//! this module holds the settings and the ranks' agreement on whether
//! a retry may run ([`Communicator::agree_retry`]), over the control
//! plane, which outlives the failed op's links.

use crate::Communicator;
use hccl_platform::{HcclError, HcclResult, Result};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Op retry settings (HCCL's defaults: off at every level, one retry,
/// 5 s hold, 1 s interval).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpRetry {
    /// Whether a failure of a link at level L0 (within a host), L1
    /// (between hosts) or L2 (between super nodes) is retried.
    pub levels: [bool; 3],
    /// Most retries of one op (`MaxCnt`, 1 to 10).
    pub max_cnt: u32,
    /// Wait from the failure to the first retry (`HoldTime`, ms in HCCL's
    /// strings, 0 to 60,000).
    pub hold_time: Duration,
    /// Wait between later retries (`IntervalTime`, as `HoldTime`).
    pub interval_time: Duration,
    /// Keep a copy of each completed collective's input, so a rank that
    /// completed an op whose link then failed for its peers can run it
    /// again for them (`HCCL_RS_OP_RETRY_KEEP`, default on). Off: HCCL's
    /// behaviour, no copy per op, and such a failure is not retried.
    pub keep_input: bool,
}

impl Default for OpRetry {
    fn default() -> Self {
        OpRetry {
            levels: [false; 3],
            max_cnt: 1,
            hold_time: Duration::from_millis(5000),
            interval_time: Duration::from_millis(1000),
            keep_input: true,
        }
    }
}

/// The level of a link (see [`OpRetry::levels`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkLevel {
    /// Within a host.
    L0 = 0,
    /// Between hosts.
    L1 = 1,
}

/// Longest `HoldTime` / `IntervalTime` HCCL accepts, ms.
const MAX_WAIT_MS: u64 = 60_000;

impl OpRetry {
    /// Whether any level is retried.
    pub fn any(&self) -> bool {
        self.levels.iter().any(|&l| l)
    }

    /// Whether a failure at `level` is retried.
    pub fn covers(&self, level: LinkLevel) -> bool {
        self.levels[level as usize]
    }

    /// Applies an `HCCL_OP_RETRY_ENABLE` string (`"L0:0,L1:1,L2:1"`; a
    /// level left out keeps its setting). `source` names where it came
    /// from, for the error.
    pub fn set_enable(&mut self, value: &str, source: &str) -> Result<()> {
        let bad = |why: &str| {
            HcclError::para(format!(
                "{source}='{value}' is invalid: {why} (expected e.g. \"L0:0,L1:1,L2:1\")"
            ))
        };
        for item in value.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (k, v) = item
                .split_once(':')
                .ok_or_else(|| bad(&format!("'{item}' is not LEVEL:0|1")))?;
            let level = match k.trim() {
                "L0" => 0,
                "L1" => 1,
                "L2" => 2,
                other => return Err(bad(&format!("unknown level '{other}' (L0, L1 or L2)"))),
            };
            self.levels[level] = match v.trim() {
                "0" => false,
                "1" => true,
                other => {
                    return Err(bad(&format!(
                        "level {} takes 0 or 1, not '{other}'",
                        k.trim()
                    )))
                }
            };
        }
        Ok(())
    }

    /// Applies an `HCCL_OP_RETRY_PARAMS` string
    /// (`"MaxCnt:3,HoldTime:5000,IntervalTime:1000"`; a key left out keeps
    /// its value).
    pub fn set_params(&mut self, value: &str, source: &str) -> Result<()> {
        let bad = |why: &str| {
            HcclError::para(format!(
                "{source}='{value}' is invalid: {why} (expected e.g. \"MaxCnt:3,HoldTime:5000,IntervalTime:1000\")"
            ))
        };
        for item in value.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (k, v) = item
                .split_once(':')
                .ok_or_else(|| bad(&format!("'{item}' is not KEY:VALUE")))?;
            let n: u64 = v
                .trim()
                .parse()
                .map_err(|_| bad(&format!("{} takes a non-negative integer", k.trim())))?;
            match k.trim() {
                "MaxCnt" => {
                    if !(1..=10).contains(&n) {
                        return Err(bad("MaxCnt must be from 1 to 10"));
                    }
                    self.max_cnt = n as u32;
                }
                "HoldTime" | "IntervalTime" => {
                    if n > MAX_WAIT_MS {
                        return Err(bad(&format!(
                            "{} must be from 0 to {MAX_WAIT_MS} ms",
                            k.trim()
                        )));
                    }
                    let t = Duration::from_millis(n);
                    if k.trim() == "HoldTime" {
                        self.hold_time = t;
                    } else {
                        self.interval_time = t;
                    }
                }
                other => {
                    return Err(bad(&format!(
                        "unknown key '{other}' (MaxCnt, HoldTime, IntervalTime)"
                    )))
                }
            }
        }
        Ok(())
    }
}

/// The text that marks a revocation made by op retry: the ranks whose
/// op it ended take part in the retry (a revocation by the application
/// is never retried).
pub const RETRY_MARK: &str = "[OpRetry]";

/// What one rank brings to the agreement on a retry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryVote {
    /// The op's number among the collectives this rank ran with retry on
    /// (every rank numbers alike).
    pub seq: u64,
    /// The op's API name (`HcclAllReduce`), for messages.
    pub op: String,
    /// Which retry of the op this is (1 for the first).
    pub attempt: u32,
    /// Why this rank cannot run the op again, if it cannot.
    pub refusal: Option<String>,
    /// The op whose input this rank kept after completing it (its
    /// previous collective), if any: it can run that op again for ranks
    /// still stopped in it.
    pub kept: Option<u64>,
}

/// What the ranks agreed ([`Communicator::agree_retry`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryPlan {
    /// Every rank stopped in the same op: each runs it again.
    Same,
    /// Some ranks completed op `behind` and stopped in the next; the
    /// others stopped in `behind`. The ranks ahead first run `behind`
    /// again from the input they kept (their result of it stands: the
    /// run only gives the others their part), then every rank runs the op
    /// it stopped in.
    CatchUp {
        /// The op the ranks behind stopped in.
        behind: u64,
    },
}

impl Communicator {
    /// The op retry settings in force, if op retry can run here: it is on
    /// at some level and the ranks are processes with a control plane
    /// (ranks that are threads of one process have no link that can drop;
    /// a rank table's communicator has no control plane to agree over).
    pub fn op_retry(&self) -> Option<&OpRetry> {
        let r = &self.config().op_retry;
        (r.any() && self.control().is_some()).then_some(r)
    }

    /// Whether some rank's process is known gone (the control plane saw
    /// its connection close without a goodbye, or it said goodbye),
    /// waiting up to `grace` for the control plane to notice what a data
    /// link found first. An op cannot run again without every rank: op
    /// retry then leaves the failure as it is (shrink is the way on).
    pub fn a_rank_is_gone(&self, grace: Duration) -> bool {
        let Some(control) = self.control() else {
            return false;
        };
        let end = std::time::Instant::now() + grace;
        loop {
            if !control.gone().is_empty() {
                return true;
            }
            if std::time::Instant::now() >= end {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// The level of the link to `peer`.
    pub fn link_level(&self, peer: u32) -> LinkLevel {
        if self.same_host(peer) {
            LinkLevel::L0
        } else {
            LinkLevel::L1
        }
    }

    /// Whether `e` (an op's error) ended the op because a link or a peer
    /// failed — what op retry may recover from: an error naming the peer
    /// (a lost or dropped link) or a revocation made by op retry on
    /// another rank. `None` for anything else; else the peer, if named.
    pub fn retry_cause(e: &HcclError) -> Option<Option<u32>> {
        // a peer's failure relayed to this rank ("peer rank 2 failed:
        // <its error>") carries the peer's reason: a link failure is
        // retried, a mismatch or a timeout found by the peer is not
        let link = hccl_platform::names_link_failure(e.message());
        match e.code() {
            HcclResult::ERoceTransfer => e.context().peer.map(Some),
            HcclResult::ERemote | HcclResult::ETcpTransfer if link => e.context().peer.map(Some),
            HcclResult::ESuspending if e.message().contains(RETRY_MARK) => Some(None),
            _ => None,
        }
    }

    /// Op retry's agreement: every rank of the communicator brings its
    /// vote (over the control plane, which outlives the op's links: a
    /// link that is down delays the votes until it is back); the retry
    /// runs if every rank stopped in the same op, or — [`RetryPlan::CatchUp`]
    /// — in that op and the next, the ranks ahead having kept the earlier
    /// op's input; and none refuses.
    /// Otherwise an `HCCL_E_OPRETRY_FAIL` error saying why, alike on every
    /// rank; a rank lost meanwhile is an error naming it (the op cannot
    /// run again without it: shrink instead). At most one agreement per
    /// communicator: a retry goes on with a rebuilt communicator, a
    /// refused one leaves this one revoked. (So the tag names no op: ranks
    /// stopped in different ops still meet, and learn it.)
    pub fn agree_retry(&self, vote: &RetryVote) -> Result<RetryPlan> {
        let rank = self.rank();
        let ctx = |e: HcclError| e.rank(rank).during("agreeing on an op retry");
        let control = self.control_for("op retry").map_err(ctx)?;
        let tag = control.tag("op-retry");
        let members: Vec<u32> = (0..self.size()).collect();
        let blob = serde_json::to_vec(vote)
            .map_err(|e| ctx(HcclError::internal(format!("encoding the retry vote: {e}"))))?;
        let parts = control
            .gather(tag, &members, blob, self.config().connect_timeout)
            .map_err(ctx)?;
        let votes = parts
            .iter()
            .enumerate()
            .map(|(r, p)| {
                serde_json::from_slice::<RetryVote>(p).map_err(|e| {
                    ctx(HcclError::para(format!(
                        "rank {r}'s retry vote is malformed: {e}"
                    )))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        decide(&votes).map_err(ctx)
    }
}

/// The agreement's outcome from every rank's vote (by rank).
fn decide(votes: &[RetryVote]) -> Result<RetryPlan> {
    let lo = votes.iter().map(|v| v.seq).min().unwrap_or(0);
    let hi = votes.iter().map(|v| v.seq).max().unwrap_or(0);
    let (r_lo, v_lo) = votes.iter().enumerate().find(|(_, v)| v.seq == lo).unwrap();
    let (r_hi, v_hi) = votes.iter().enumerate().find(|(_, v)| v.seq == hi).unwrap();
    let plan = if lo == hi {
        RetryPlan::Same
    } else if hi == lo + 1 && votes.iter().all(|v| v.seq == lo || v.kept == Some(lo)) {
        RetryPlan::CatchUp { behind: lo }
    } else {
        let why = if hi == lo + 1 {
            "a rank ahead kept no input of the earlier op"
        } else {
            "more than one op apart"
        };
        return Err(HcclError::opretry_fail(format!(
            "{RETRY_MARK} the op cannot run again: the ranks stopped in different ops \
             (rank {r_lo} in op {lo} {}, rank {r_hi} in op {hi} {}: {why}), so the inputs \
             are not those of one op; call recover on every rank to go on",
            v_lo.op, v_hi.op
        )));
    };
    if let Some(v) = votes
        .iter()
        .find(|v| v.attempt != v_lo.attempt && v.seq == lo)
    {
        return Err(HcclError::opretry_fail(format!(
            "{RETRY_MARK} op {lo} cannot run again: the ranks are at different retries of it \
             ({} and {})",
            v_lo.attempt, v.attempt
        )));
    }
    if let Some((r, v)) = votes.iter().enumerate().find(|(_, v)| v.refusal.is_some()) {
        return Err(HcclError::opretry_fail(format!(
            "{RETRY_MARK} op {} {} cannot run again: on rank {r}, {}",
            v.seq,
            v.op,
            v.refusal.as_deref().unwrap_or_default()
        )));
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hccl_strings_parse_and_bad_ones_say_why() {
        let mut r = OpRetry::default();
        assert!(!r.any());
        r.set_enable("L0:0, L1:1,L2:1", "HCCL_OP_RETRY_ENABLE")
            .unwrap();
        assert_eq!(r.levels, [false, true, true]);
        assert!(r.covers(LinkLevel::L1) && !r.covers(LinkLevel::L0));
        r.set_params(
            "MaxCnt:3,HoldTime:100,IntervalTime:0",
            "HCCL_OP_RETRY_PARAMS",
        )
        .unwrap();
        assert_eq!(r.max_cnt, 3);
        assert_eq!(r.hold_time, Duration::from_millis(100));
        assert_eq!(r.interval_time, Duration::ZERO);
        // a key left out keeps its value
        r.set_params("MaxCnt:2", "x").unwrap();
        assert_eq!((r.max_cnt, r.hold_time), (2, Duration::from_millis(100)));
        for (v, why) in [
            ("L3:1", "unknown level 'L3'"),
            ("L1:2", "level L1 takes 0 or 1"),
            ("L1", "'L1' is not LEVEL:0|1"),
        ] {
            let e = OpRetry::default()
                .set_enable(v, "HCCL_OP_RETRY_ENABLE")
                .unwrap_err();
            assert_eq!(e.code(), HcclResult::EPara);
            assert!(e.message().contains(why), "{e}");
            assert!(e.message().contains("HCCL_OP_RETRY_ENABLE"), "{e}");
        }
        for (v, why) in [
            ("MaxCnt:0", "MaxCnt must be from 1 to 10"),
            ("MaxCnt:11", "MaxCnt must be from 1 to 10"),
            ("HoldTime:60001", "HoldTime must be from 0 to 60000 ms"),
            ("Hold:1", "unknown key 'Hold'"),
            (
                "IntervalTime:-1",
                "IntervalTime takes a non-negative integer",
            ),
        ] {
            let e = OpRetry::default()
                .set_params(v, "hcclRetryParams")
                .unwrap_err();
            assert_eq!(e.code(), HcclResult::EPara);
            assert!(e.message().contains(why), "{e}");
        }
    }

    fn vote(seq: u64, refusal: Option<&str>) -> RetryVote {
        RetryVote {
            seq,
            op: "HcclAllReduce".into(),
            attempt: 1,
            refusal: refusal.map(str::to_owned),
            kept: seq.checked_sub(1),
        }
    }

    #[test]
    fn the_ranks_retry_only_the_same_op_and_only_if_none_refuses() {
        assert_eq!(
            decide(&[vote(7, None), vote(7, None), vote(7, None)]).unwrap(),
            RetryPlan::Same
        );
        // a rank one op ahead that kept the earlier op's input catches up
        assert_eq!(
            decide(&[vote(7, None), vote(8, None), vote(7, None)]).unwrap(),
            RetryPlan::CatchUp { behind: 7 }
        );
        // one that kept none cannot
        let mut ahead = vote(8, None);
        ahead.kept = None;
        let e = decide(&[vote(7, None), ahead, vote(7, None)]).unwrap_err();
        assert_eq!(e.code(), HcclResult::EOpretryFail);
        assert!(
            e.message().contains(
                "rank 0 in op 7 HcclAllReduce, rank 1 in op 8 HcclAllReduce: a rank ahead kept no input"
            ),
            "{e}"
        );
        let e = decide(&[vote(7, None), vote(9, None)]).unwrap_err();
        assert!(e.message().contains("more than one op apart"), "{e}");
        let e = decide(&[vote(7, None), vote(7, Some("the op runs in place"))]).unwrap_err();
        assert_eq!(e.code(), HcclResult::EOpretryFail);
        assert!(
            e.message()
                .contains("op 7 HcclAllReduce cannot run again: on rank 1, the op runs in place"),
            "{e}"
        );
    }

    #[test]
    fn link_and_retry_errors_are_retry_causes_others_are_not() {
        let lost = HcclError::remote("lost peer rank 2 (process 9 on host h)").peer(2);
        assert_eq!(Communicator::retry_cause(&lost), Some(Some(2)));
        let dropped =
            HcclError::tcp_transfer("the TCP link between rank 0 and rank 1 dropped").peer(1);
        assert_eq!(Communicator::retry_cause(&dropped), Some(Some(1)));
        let relayed =
            HcclError::remote("peer rank 3 failed: the TCP link between rank 3 and rank 1 dropped")
                .peer(3);
        assert_eq!(Communicator::retry_cause(&relayed), Some(Some(3)));
        // a mismatch or a timeout a peer found, relayed, is not a link failure
        let mismatch = HcclError::remote(
            "peer rank 0 failed: The arguments for collective communication are inconsistent",
        )
        .peer(0);
        assert_eq!(Communicator::retry_cause(&mismatch), None);
        let theirs = HcclError::suspending(format!("revoked by rank 3: {RETRY_MARK} link"));
        assert_eq!(Communicator::retry_cause(&theirs), Some(None));
        let users = HcclError::suspending("revoked by rank 3: the application gave up");
        assert_eq!(Communicator::retry_cause(&users), None);
        assert_eq!(Communicator::retry_cause(&HcclError::timeout("x")), None);
        assert_eq!(Communicator::retry_cause(&HcclError::para("x")), None);
    }
}
