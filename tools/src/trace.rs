//! `hccl-trace`'s analysis of flight-recorder dumps (one JSON file per
//! rank, `HCCL_RS_FR_DUMP_DIR`): per communicator, the first op not
//! completed on every rank — which ranks never entered it, which wait in
//! it on whom at which step, which failed and why — and the ops whose
//! arguments differ between ranks. Also the merge of the ranks'
//! timelines (`HCCL_RS_TRACE`, Chrome trace JSON) into one file.

use hccl_adapter::{FrDump, FrEntry};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

/// The files in `paths`: files as given, and in directories those named
/// `<prefix>*.json`, sorted; `what` names them in the error for none.
fn files_in(paths: &[PathBuf], prefix: &str, what: &str) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            let rd = std::fs::read_dir(p).map_err(|e| format!("reading {}: {e}", p.display()))?;
            let mut found: Vec<PathBuf> = rd
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| {
                    let name = f.file_name().and_then(|n| n.to_str()).unwrap_or_default();
                    name.starts_with(prefix) && name.ends_with(".json")
                })
                .collect();
            found.sort();
            files.extend(found);
        } else {
            files.push(p.clone());
        }
    }
    if files.is_empty() {
        return Err(format!("no {what} ({prefix}*.json) found"));
    }
    Ok(files)
}

/// The dumps found in `paths` (files, or directories holding
/// `hccl_fr_*.json`), with the files they came from.
pub fn load_dumps(paths: &[PathBuf]) -> Result<Vec<(PathBuf, FrDump)>, String> {
    let files = files_in(paths, "hccl_fr_", "flight-recorder dumps")?;
    files
        .into_iter()
        .map(|f| {
            let text =
                std::fs::read_to_string(&f).map_err(|e| format!("reading {}: {e}", f.display()))?;
            let dump: FrDump = serde_json::from_str(&text)
                .map_err(|e| format!("{} is not a flight-recorder dump: {e}", f.display()))?;
            Ok((f, dump))
        })
        .collect()
}

/// One rank's part in the op the report is about.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RankState {
    /// The rank.
    pub rank: u32,
    /// Its entry's state, or `never entered` / `not recorded` (the op
    /// fell out of its ring).
    pub state: String,
    /// The step, verb and peer it waits in, if it does.
    pub waiting: Option<String>,
    /// Its stream's error, if it failed.
    pub error: Option<String>,
    /// Ops it issued in total.
    pub ops_issued: u64,
}

/// Ops whose arguments differ between ranks.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Mismatch {
    /// The op's sequence number.
    pub seq: u64,
    /// Each distinct set of arguments, with the ranks that passed it.
    pub sides: Vec<(String, Vec<u32>)>,
}

/// What happened on one communicator.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CommReport {
    /// The communicator's name.
    pub comm: String,
    /// Its ranks.
    pub size: u32,
    /// Ranks with a dump.
    pub dumped: Vec<u32>,
    /// Ranks without one.
    pub missing_dumps: Vec<u32>,
    /// The first op not completed on every dumped rank: its sequence
    /// number and description.
    pub stuck_op: Option<(u64, String)>,
    /// Every dumped rank's part in it.
    pub ranks: Vec<RankState>,
    /// Ranks that never entered it.
    pub never_entered: Vec<u32>,
    /// Ops whose arguments differ between ranks.
    pub mismatches: Vec<Mismatch>,
    /// Ranks the dumped ranks wait on in that op (from their waits), with
    /// the ranks waiting on each: whom to look at first in a hang.
    pub waited_on: Vec<(u32, Vec<u32>)>,
}

/// What an entry's arguments are, as ranks must agree on them.
fn signature(e: &FrEntry) -> String {
    let mut s = format!("{} count {} {}", e.op, e.count, e.dtype);
    if let Some(r) = &e.reduce_op {
        let _ = write!(s, " {r}");
    }
    if let Some(r) = e.root {
        let _ = write!(s, " root {r}");
    }
    s
}

/// The description of an op in a report.
fn describe(e: &FrEntry) -> String {
    format!("{} (tag '{}', {})", signature(e), e.tag, e.algorithm)
}

/// Whether ranks may legitimately pass different arguments to the op
/// (point-to-point, and the V ops' own counts).
fn may_differ(e: &FrEntry) -> bool {
    matches!(
        e.op.as_str(),
        "Send" | "Receive" | "AllGatherV" | "ReduceScatterV" | "AllToAllV"
    )
}

/// Analyses the dumps, one report per communicator (by name).
pub fn analyse(dumps: &[(PathBuf, FrDump)]) -> Vec<CommReport> {
    let mut by_comm: BTreeMap<&str, Vec<&FrDump>> = BTreeMap::new();
    for (_, d) in dumps {
        by_comm.entry(d.comm.as_str()).or_default().push(d);
    }
    by_comm
        .into_iter()
        .map(|(comm, mut ds)| {
            ds.sort_by_key(|d| d.rank);
            ds.dedup_by_key(|d| d.rank);
            let size = ds.iter().map(|d| d.size).max().unwrap_or(0);
            let dumped: Vec<u32> = ds.iter().map(|d| d.rank).collect();
            let missing_dumps = (0..size).filter(|r| !dumped.contains(r)).collect();
            // seq → rank → entry
            let mut ops: BTreeMap<u64, BTreeMap<u32, &FrEntry>> = BTreeMap::new();
            for d in &ds {
                for e in &d.entries {
                    ops.entry(e.seq).or_default().insert(d.rank, e);
                }
            }
            let mismatches = ops
                .iter()
                .filter_map(|(&seq, per)| {
                    let mut sides: BTreeMap<String, Vec<u32>> = BTreeMap::new();
                    for (&r, e) in per {
                        if !may_differ(e) {
                            sides.entry(signature(e)).or_default().push(r);
                        }
                    }
                    (sides.len() > 1).then(|| Mismatch {
                        seq,
                        sides: sides.into_iter().collect(),
                    })
                })
                .collect();
            // the first op some dumped rank did not complete: issued by
            // none of them yet counts too (a rank that never entered it
            // while others did)
            // a refused op left nothing queued: nothing waits for it
            let done =
                |e: &FrEntry| matches!(e.state.as_str(), "completed" | "captured" | "refused");
            let last_seq = ds.iter().map(|d| d.ops_issued).max().unwrap_or(0);
            let stuck = (1..=last_seq).find(|seq| {
                ds.iter()
                    .any(|d| match ops.get(seq).and_then(|m| m.get(&d.rank)) {
                        Some(e) => !done(e),
                        None => d.ops_issued < *seq,
                    })
            });
            let mut ranks = Vec::new();
            let mut never_entered = Vec::new();
            let mut stuck_op = None;
            if let Some(seq) = stuck {
                let per = ops.get(&seq);
                stuck_op = per
                    .and_then(|m| m.values().next())
                    .map(|e| (seq, describe(e)))
                    .or(Some((seq, "an op not in any rank's ring".into())));
                for d in &ds {
                    let e = per.and_then(|m| m.get(&d.rank));
                    let state = match e {
                        Some(e) => e.state.clone(),
                        None if d.ops_issued < seq => {
                            never_entered.push(d.rank);
                            "never entered".into()
                        }
                        None => "not recorded".into(),
                    };
                    ranks.push(RankState {
                        rank: d.rank,
                        state,
                        waiting: e.and_then(|e| e.waiting.as_ref()).map(|w| {
                            let mut s = format!("step {}", w.step);
                            if let Some(v) = &w.verb {
                                let _ = write!(s, ", {v}");
                            }
                            if let Some(p) = w.peer {
                                let _ = write!(s, " with rank {p}");
                            }
                            s
                        }),
                        error: e.and_then(|e| e.error.clone()),
                        ops_issued: d.ops_issued,
                    });
                }
            }
            let mut waited: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
            if let Some(per) = stuck.and_then(|seq| ops.get(&seq)) {
                for (&r, e) in per {
                    if let Some(p) = e.waiting.as_ref().and_then(|w| w.peer) {
                        waited.entry(p).or_default().push(r);
                    }
                }
            }
            CommReport {
                waited_on: waited.into_iter().collect(),
                comm: comm.to_owned(),
                size,
                dumped,
                missing_dumps,
                stuck_op,
                ranks,
                never_entered,
                mismatches,
            }
        })
        .collect()
}

fn list(ranks: &[u32]) -> String {
    ranks
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The reports as a person reads them: a few lines per communicator.
pub fn render(reports: &[CommReport]) -> String {
    let mut out = String::new();
    for r in reports {
        let _ = writeln!(
            out,
            "communicator {}: {} ranks, dumps from {}",
            r.comm,
            r.size,
            if r.missing_dumps.is_empty() {
                "all".to_owned()
            } else {
                format!("{} (none from {})", list(&r.dumped), list(&r.missing_dumps))
            }
        );
        match &r.stuck_op {
            None => {
                let _ = writeln!(out, "  every recorded op completed on every rank");
            }
            Some((seq, what)) => {
                let _ = writeln!(out, "  first op not completed everywhere: #{seq} {what}");
                if !r.never_entered.is_empty() {
                    let _ = writeln!(
                        out,
                        "  never entered by rank{} {}",
                        if r.never_entered.len() > 1 { "s" } else { "" },
                        list(&r.never_entered)
                    );
                }
                for (p, who) in &r.waited_on {
                    let note = if r.missing_dumps.contains(p) {
                        " (no dump from it: look at that rank first)"
                    } else {
                        ""
                    };
                    let _ = writeln!(
                        out,
                        "  rank {p} is waited on by rank{} {}{note}",
                        if who.len() > 1 { "s" } else { "" },
                        list(who)
                    );
                }
                for s in r.ranks.iter().filter(|s| s.state != "never entered") {
                    let mut line = format!("  rank {}: {}", s.rank, s.state);
                    if let Some(w) = &s.waiting {
                        let _ = write!(line, ", waiting at {w}");
                    }
                    if let Some(e) = &s.error {
                        let _ = write!(line, " ({e})");
                    }
                    let _ = writeln!(out, "{line}");
                }
                for s in r.ranks.iter().filter(|s| s.state == "never entered") {
                    let _ = writeln!(
                        out,
                        "  rank {}: never entered it (issued {} ops)",
                        s.rank, s.ops_issued
                    );
                }
            }
        }
        for m in &r.mismatches {
            let sides: Vec<String> = m
                .sides
                .iter()
                .map(|(sig, ranks)| {
                    format!(
                        "rank{} {}: {sig}",
                        if ranks.len() > 1 { "s" } else { "" },
                        list(ranks)
                    )
                })
                .collect();
            let _ = writeln!(out, "  mismatched op #{}: {}", m.seq, sides.join(" vs "));
        }
    }
    out
}

/// Which rank entered ops last, from a (merged) timeline's op spans: for
/// every op sequence number that every rank of the trace has a span of,
/// the rank whose span began last and by how much after the first.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LateRank {
    /// The rank.
    pub rank: u32,
    /// Ops it entered last.
    pub last_in: u64,
    /// Ops compared.
    pub ops: u64,
    /// Mean lag behind the first rank over the ops it entered last, µs.
    pub mean_lag_us: f64,
}

/// The ranks that entered ops last (see [`LateRank`]), most often first.
/// A rank that is last in most ops is the slow one: the others wait for it.
pub fn late_ranks(trace: &serde_json::Value) -> Vec<LateRank> {
    let empty = Vec::new();
    let events = trace["traceEvents"].as_array().unwrap_or(&empty);
    // seq → rank → first begin (an op may have spans on several streams)
    let mut by_seq: BTreeMap<u64, BTreeMap<u32, f64>> = BTreeMap::new();
    let mut ranks = std::collections::BTreeSet::new();
    for e in events {
        if e["cat"] != "op" {
            continue;
        }
        let (Some(seq), Some(pid), Some(ts)) = (
            e["args"]["seq"].as_u64(),
            e["pid"].as_u64(),
            e["ts"].as_f64(),
        ) else {
            continue;
        };
        ranks.insert(pid as u32);
        let t = by_seq
            .entry(seq)
            .or_default()
            .entry(pid as u32)
            .or_insert(ts);
        *t = t.min(ts);
    }
    let mut stats: BTreeMap<u32, (u64, f64)> = BTreeMap::new();
    let mut ops = 0;
    for per in by_seq
        .values()
        .filter(|m| m.len() == ranks.len() && m.len() > 1)
    {
        ops += 1;
        let first = per.values().copied().fold(f64::INFINITY, f64::min);
        let (&last, &t) = per
            .iter()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .expect("non-empty");
        let s = stats.entry(last).or_default();
        s.0 += 1;
        s.1 += t - first;
    }
    let mut out: Vec<LateRank> = stats
        .into_iter()
        .map(|(rank, (n, lag))| LateRank {
            rank,
            last_in: n,
            ops,
            mean_lag_us: lag / n as f64,
        })
        .collect();
    out.sort_by(|a, b| b.last_in.cmp(&a.last_in).then(a.rank.cmp(&b.rank)));
    out
}

/// [`late_ranks`] in a few lines.
pub fn render_late(late: &[LateRank]) -> String {
    let mut out = String::new();
    let Some(ops) = late.first().map(|l| l.ops) else {
        return "no op was traced on every rank: nothing to compare\n".into();
    };
    let _ = writeln!(out, "ops traced on every rank: {ops}; entered last by:");
    for l in late {
        let _ = writeln!(
            out,
            "  rank {}: {} ops ({:.0}%), {:.1} µs after the first on average",
            l.rank,
            l.last_in,
            100.0 * l.last_in as f64 / ops as f64,
            l.mean_lag_us
        );
    }
    out
}

/// The timeline files in `paths` (files, or directories holding
/// `hccl_trace_*.json`), merged into one Chrome trace / Perfetto JSON
/// object: every file's `traceEvents` (metadata first, then by time), and
/// the files merged under `otherData.merged`.
pub fn merge_timelines(paths: &[PathBuf]) -> Result<serde_json::Value, String> {
    use serde_json::Value;
    let files = files_in(paths, "hccl_trace_", "timelines")?;
    let mut meta = Vec::new();
    let mut timed = Vec::new();
    let mut merged = Vec::new();
    for f in &files {
        let text =
            std::fs::read_to_string(f).map_err(|e| format!("reading {}: {e}", f.display()))?;
        let v: Value =
            serde_json::from_str(&text).map_err(|e| format!("{} is not JSON: {e}", f.display()))?;
        let events = match v.get("traceEvents") {
            Some(Value::Array(a)) => a,
            _ => return Err(format!("{} has no traceEvents array", f.display())),
        };
        for e in events {
            if e.get("ph").and_then(Value::as_str) == Some("M") {
                meta.push(e.clone());
            } else {
                timed.push(e.clone());
            }
        }
        merged.push(f.display().to_string());
    }
    let ts = |e: &Value| e.get("ts").and_then(Value::as_f64).unwrap_or(0.0);
    timed.sort_by(|a, b| ts(a).total_cmp(&ts(b)));
    meta.extend(timed);
    Ok(serde_json::json!({
        "traceEvents": meta,
        "displayTimeUnit": "ns",
        "otherData": { "merged": merged, "format": "hccl-rs timeline 1" },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hccl_adapter::{FrWait, FR_DUMP_VERSION};

    fn entry(seq: u64, count: u64, state: &str, waiting_on: Option<u32>) -> FrEntry {
        FrEntry {
            seq,
            op: "AllReduce".into(),
            tag: "AllReduce_c".into(),
            count,
            dtype: "fp32".into(),
            reduce_op: Some("sum".into()),
            root: None,
            peer: None,
            algorithm: "AllReduceRingExecutor".into(),
            stream: 1,
            state: state.into(),
            issued_us: 1.0,
            started_us: None,
            completed_us: None,
            failed_us: None,
            waiting: waiting_on.map(|p| FrWait {
                step: 2,
                verb: Some("RxWaitDone".into()),
                peer: Some(p),
                what: String::new(),
            }),
            error: None,
        }
    }

    fn dump(rank: u32, entries: Vec<FrEntry>) -> (PathBuf, FrDump) {
        let dump = FrDump {
            version: FR_DUMP_VERSION,
            comm: "c".into(),
            rank,
            size: 4,
            host: "h".into(),
            pid: 1,
            reason: "test".into(),
            dumped_us: 2.0,
            ops_issued: entries.len() as u64,
            failures: vec![],
            entries,
        };
        (PathBuf::from(format!("r{rank}")), dump)
    }

    #[test]
    fn a_hang_names_the_rank_everyone_waits_on_and_a_mismatch_names_both_sides() {
        // rank 3 left no dump; 0 and 1 wait on it in op 2, 2 waits on 1;
        // op 1's count differs on rank 2
        let dumps = vec![
            dump(
                0,
                vec![
                    entry(1, 8, "completed", None),
                    entry(2, 8, "started", Some(3)),
                ],
            ),
            dump(
                1,
                vec![
                    entry(1, 8, "completed", None),
                    entry(2, 8, "started", Some(3)),
                ],
            ),
            dump(
                2,
                vec![
                    entry(1, 16, "completed", None),
                    entry(2, 8, "started", Some(1)),
                ],
            ),
        ];
        let reports = analyse(&dumps);
        assert_eq!(reports.len(), 1);
        let r = &reports[0];
        assert_eq!(r.missing_dumps, vec![3]);
        assert_eq!(r.stuck_op.as_ref().map(|s| s.0), Some(2));
        assert_eq!(r.waited_on, vec![(1, vec![2]), (3, vec![0, 1])]);
        assert_eq!(r.mismatches.len(), 1);
        let text = render(&reports);
        assert!(text.contains("dumps from 0, 1, 2 (none from 3)"), "{text}");
        assert!(
            text.contains(
                "rank 3 is waited on by ranks 0, 1 (no dump from it: look at that rank first)"
            ),
            "{text}"
        );
        assert!(
            text.contains("rank 0: started, waiting at step 2, RxWaitDone with rank 3"),
            "{text}"
        );
        assert!(
            text.contains("mismatched op #1: rank 2: AllReduce count 16 fp32 sum vs ranks 0, 1: AllReduce count 8 fp32 sum"),
            "{text}"
        );
    }
}
