//! `hccl-test --plot`: the sweep's rows as a chart, next to the cost
//! model's prediction.
//!
//! The prediction is the one the framework's selector works with: for
//! each size, a [`SelectQuery`] for the op on the measured communicator's
//! topology (its hosts decide which link a flat plan crosses and how a
//! hierarchical one splits into levels), with the cost parameters that
//! communicator's selector was given (`CommConfig::cost`: the tuning file
//! when there is one, else the built-in defaults), answered by the
//! registry's declaration of the executor that ran. The AIV and
//! direct-read executors win the selector's ranking on a score and have
//! no formula of their own (the time they declare is the mesh plan's they
//! replace); where one of them ran, the chart shows instead what the
//! α-β-γ ranking alone picks (the cost-model candidates, as the selector
//! ranks them when neither is offered), in a line of its own.

use crate::args::PerfArgs;
use crate::perf::{PerfOp, Row};
use crate::plot::{fmt_bytes, utc_date, Chart, Series, Style};
use hccl_adapter::{HcclComm, Tuning};
use hccl_algorithm::cost::CostParams;
use hccl_algorithm::{
    best, model_bytes, registry, Candidate, Estimate, OpType, SelectLimits, SelectQuery, TopoInfo,
};

/// What the model needs of the measured communicator.
pub(crate) struct ModelContext {
    /// Its topology (ranks per host).
    pub(crate) topo: TopoInfo,
    /// Its selector's cost parameters.
    pub(crate) cost: CostParams,
    /// Where they came from, for the chart's small print.
    pub(crate) source: String,
}

impl ModelContext {
    /// The context of `comm`, the communicator the measured ops ran on.
    pub(crate) fn of(comm: &HcclComm) -> ModelContext {
        let c = comm.communicator();
        let cost = c.config().cost;
        let source = match cost {
            Some(_) => {
                let file = std::env::var("HCCL_RS_TUNING_FILE")
                    .ok()
                    .filter(|p| !p.trim().is_empty())
                    .or_else(|| Tuning::default_path().map(|p| p.display().to_string()))
                    .unwrap_or_default();
                format!("calibrated, tuning file {file}")
            }
            None => "built-in defaults (no tuning file; hccl-test --calibrate makes one)".into(),
        };
        ModelContext {
            topo: c.topo().clone(),
            cost: cost.unwrap_or_default(),
            source,
        }
    }
}

/// The cost-model op of a perf op (`None`: no formula can apply).
fn op_type(op: PerfOp) -> Option<OpType> {
    Some(match op {
        PerfOp::AllReduce => OpType::AllReduce,
        PerfOp::AllGather => OpType::AllGather,
        PerfOp::ReduceScatter => OpType::ReduceScatter,
        PerfOp::Broadcast => OpType::Broadcast,
        PerfOp::Reduce => OpType::Reduce,
        PerfOp::Scatter => OpType::Scatter,
        PerfOp::Gather => OpType::Gather,
        PerfOp::AllToAll => OpType::AllToAll,
        PerfOp::AllGatherV => OpType::AllGatherV,
        PerfOp::ReduceScatterV => OpType::ReduceScatterV,
        PerfOp::AllToAllV => OpType::AllToAllV,
        PerfOp::SendRecv | PerfOp::Barrier => return None,
    })
}

/// Whether an estimate is the α-β-γ model's (not a score that a stand-in
/// time rides on) and a usable time.
fn is_formula(e: &Estimate) -> bool {
    matches!(e.score, Estimate::MODEL_SCORE | Estimate::PROVISIONAL_SCORE)
        && e.micros.is_finite()
        && e.micros >= 0.0
}

/// The model's word on one row.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Predicted {
    /// The executor that ran has a formula: its predicted µs.
    Ran(f64),
    /// It has none; the best cost-model plan is this one, at these µs.
    Best(String, f64),
    /// No formula applies.
    None,
}

impl Predicted {
    /// The µs of [`Predicted::Ran`].
    fn ran(&self) -> Option<f64> {
        match self {
            Predicted::Ran(us) => Some(*us),
            _ => None,
        }
    }

    /// The µs of [`Predicted::Best`].
    fn best(&self) -> Option<f64> {
        match self {
            Predicted::Best(_, us) => Some(*us),
            _ => None,
        }
    }
}

/// The prediction for `row` (an op of `row.bytes` as hccl-test counts
/// them, run by `row.algorithm`) on `ctx`'s communicator.
pub(crate) fn predict_row(op: PerfOp, row: &Row, ctx: &ModelContext) -> Predicted {
    let Some(op_type) = op_type(op) else {
        return Predicted::None;
    };
    let p = ctx.topo.user_rank_size.max(1);
    let elem = row.bytes.checked_div(row.count).unwrap_or(1);
    // the count each rank passes, as the sweep calls the op
    let count = if op.split() {
        row.count / p as u64
    } else {
        row.count
    };
    let bytes = model_bytes(op_type, count * elem, p);
    let q = SelectQuery::new(
        op_type,
        &ctx.topo,
        bytes,
        &ctx.cost,
        SelectLimits::default(),
    );
    let reg = registry();
    if let Some(e) = reg
        .info(&row.algorithm)
        .and_then(|info| info.estimate(&q))
        .filter(is_formula)
    {
        return Predicted::Ran(e.micros);
    }
    let priced: Vec<Candidate> = reg
        .candidates(&q)
        .into_iter()
        .filter(|c| is_formula(&c.estimate))
        .collect();
    match best(&priced) {
        Some(i) => Predicted::Best(priced[i].name.to_string(), priced[i].estimate.micros),
        None => Predicted::None,
    }
}

/// The legend of the measured line (bus bandwidth left, average time
/// right).
const MEASURED: &str = "measured: bus bandwidth / average of n ops back to back";

/// `AllReduceRingExecutor` → `AllReduceRing`, for legends.
fn short(name: &str) -> &str {
    name.strip_suffix("Executor").unwrap_or(name)
}

/// The distinct names of `names`, in first-seen order, shortened.
fn distinct<'a>(names: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut v: Vec<&str> = Vec::new();
    for n in names.map(short) {
        if !v.contains(&n) {
            v.push(n);
        }
    }
    v
}

/// Which executor ran which sizes: `AllReduceMesh 8 B-8 KiB, AllReduceRing 16 KiB-64 MiB`.
fn executor_ranges(rows: &[Row]) -> String {
    let mut runs: Vec<(&str, u64, u64)> = Vec::new();
    for r in rows {
        let name = short(&r.algorithm);
        match runs.last_mut() {
            Some((n, _, hi)) if *n == name => *hi = r.bytes,
            _ => runs.push((name, r.bytes, r.bytes)),
        }
    }
    runs.iter()
        .map(|(n, lo, hi)| {
            let n = if n.is_empty() { "(not reported)" } else { n };
            if lo == hi {
                format!("{n} {}", fmt_bytes(*lo as f64))
            } else {
                format!("{n} {}-{}", fmt_bytes(*lo as f64), fmt_bytes(*hi as f64))
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The title's "transport" part: the transport and where the ranks are.
fn transport_text(args: &PerfArgs) -> String {
    let mut t = args.transport.clone();
    if let Some(spec) = &args.netns {
        t.push_str(&format!(" (netns hosts {spec})"));
    } else if args.hosts > 1 {
        t.push_str(&format!(" ({} hosts)", args.hosts));
    }
    t
}

/// The chart of a sweep: measured bus bandwidth and times (average, p50,
/// p99), and the model's prediction per size (see the module docs).
pub(crate) fn sweep_chart(args: &PerfArgs, op: PerfOp, rows: &[Row], ctx: &ModelContext) -> Chart {
    let p = ctx.topo.user_rank_size;
    let dtype = rows.first().map_or(args.datatype.as_str(), |r| &r.dtype);
    let mut title = format!(
        "{}, p={p}, {dtype}, transport {}",
        op.name(),
        transport_text(args)
    );
    if let Some(a) = &args.algo {
        title.push_str(&format!(", --algo {a}"));
    }
    title.push_str(&format!(", {}", utc_date()));
    let x = |b: u64| b.max(1) as f64;
    let measured = |color, label: &str, v: &dyn Fn(&Row) -> f64| Series {
        label: label.into(),
        points: rows
            .iter()
            .map(|r| (x(r.bytes), v(r)))
            .filter(|&(_, y)| y > 0.0)
            .collect(),
        color,
        style: Style::Measured,
    };
    let mut chart = Chart {
        title,
        bandwidth: vec![measured(0, MEASURED, &|r| r.busbw_gbps)],
        time: vec![
            measured(0, MEASURED, &|r| r.time_us),
            measured(3, "p50 of n single ops", &|r| r.p50_us),
            measured(4, "p99 of n single ops", &|r| r.p99_us),
        ],
        footer: Vec::new(),
    };
    if op == PerfOp::Barrier {
        // no bandwidth: a note says why
        chart.bandwidth[0] =
            Series::note("barrier moves no data: no bandwidth (its time is drawn at 1 B)");
    }
    let busbw = |r: &Row, us: f64| {
        if us > 0.0 {
            r.bytes as f64 / us / 1e3 * op.bus_factor(p)
        } else {
            0.0
        }
    };
    let predicted: Vec<Predicted> = rows.iter().map(|r| predict_row(op, r, ctx)).collect();
    // the executors that ran with a formula; the best plans standing in
    // for those without, and those
    let ran = distinct(
        rows.iter()
            .zip(&predicted)
            .filter(|(_, p)| matches!(p, Predicted::Ran(_)))
            .map(|(r, _)| r.algorithm.as_str()),
    );
    let stand_ins = distinct(predicted.iter().filter_map(|p| match p {
        Predicted::Best(name, _) => Some(name.as_str()),
        _ => None,
    }));
    let unpriced = distinct(
        rows.iter()
            .zip(&predicted)
            .filter(|(_, p)| !matches!(p, Predicted::Ran(_)))
            .map(|(r, _)| r.algorithm.as_str()),
    );
    let lines = [
        (
            1,
            format!("model: {} (the executor that ran)", ran.join(", ")),
            Predicted::ran as fn(&Predicted) -> Option<f64>,
        ),
        (
            2,
            format!(
                "model: best α-β-γ plan {} where {} ran (no formula)",
                stand_ins.join(", "),
                unpriced.join(", ")
            ),
            Predicted::best,
        ),
    ];
    for (color, label, pick) in lines {
        if !predicted.iter().any(|p| pick(p).is_some()) {
            continue;
        }
        // a point per row, NaN where another line (or none) predicts: the
        // line breaks there
        let at = |f: &dyn Fn(&Row, f64) -> f64| -> Vec<(f64, f64)> {
            rows.iter()
                .zip(&predicted)
                .map(|(r, p)| (x(r.bytes), pick(p).map_or(f64::NAN, |us| f(r, us))))
                .collect()
        };
        chart.bandwidth.push(Series {
            label: label.clone(),
            points: at(&|r, us| busbw(r, us)),
            color,
            style: Style::Model,
        });
        chart.time.push(Series {
            label,
            points: at(&|_, us| us),
            color,
            style: Style::Model,
        });
    }
    if predicted.iter().all(|p| *p == Predicted::None) {
        let note = match op_type(op) {
            None => format!("no model prediction: {} has no cost formula", op.name()),
            Some(_) => format!(
                "no model prediction: no cost formula for {} ({})",
                op.name(),
                unpriced.join(", ")
            ),
        };
        chart.bandwidth.push(Series::note(note.clone()));
        chart.time.push(Series::note(note));
    }
    chart.footer.push(format!(
        "executors that ran: {}. Every figure is the slowest rank's.",
        executor_ranges(rows)
    ));
    if args.transport == "tcp" && ctx.topo.server_num() <= 1 {
        chart.footer.push(
            "--transport tcp: every link is TCP, but the ranks share a host, so the selector (and the model line) prices them as level 0 links".into(),
        );
    }
    let c = &ctx.cost;
    chart.footer.push(format!(
        "model: α-β-γ (algorithm/src/cost.rs) as the selector prices it on {} host(s); parameters {}: level 0 α {:.3} µs, {:.3} GB/s; level 1 α {:.3} µs, {:.3} GB/s; reduce {:.3} GB/s",
        ctx.topo.server_num(),
        ctx.source,
        c.level0.alpha_us,
        1.0 / (c.level0.beta_us_per_byte * 1e3),
        c.level1.alpha_us,
        1.0 / (c.level1.beta_us_per_byte * 1e3),
        1.0 / (c.gamma_us_per_byte * 1e3),
    ));
    chart
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(bytes: u64, algorithm: &str) -> Row {
        Row {
            op: "all_reduce".into(),
            ranks: 4,
            bytes,
            count: bytes / 4,
            dtype: "fp32".into(),
            time_us: 10.0,
            algbw_gbps: 0.0,
            busbw_gbps: 0.0,
            check: "NULL".into(),
            algorithm: algorithm.into(),
            p50_us: 9.0,
            p99_us: 12.0,
            max_us: 12.0,
        }
    }

    fn ctx(hosts: &[u32]) -> ModelContext {
        let map: Vec<u32> = hosts
            .iter()
            .enumerate()
            .flat_map(|(h, &n)| std::iter::repeat_n(h as u32, n as usize))
            .collect();
        ModelContext {
            topo: TopoInfo::new(0, map).unwrap(),
            cost: CostParams::default(),
            source: "test".into(),
        }
    }

    /// The executor that ran is priced as the selector prices it; AIV
    /// and direct executors fall back to the best cost-model plan; ops
    /// without a formula get none.
    #[test]
    fn predictions_follow_the_selector() {
        use hccl_algorithm::cost::{predict, Algo};
        let c = CostParams::default();
        let one = ctx(&[4]);
        let r = row(1 << 20, "AllReduceRingExecutor");
        let ring = predict(
            Algo::Ring,
            OpType::AllReduce,
            4,
            1 << 20,
            c.level0,
            c.gamma_us_per_byte,
        )
        .unwrap();
        assert_eq!(
            predict_row(PerfOp::AllReduce, &r, &one),
            Predicted::Ran(ring)
        );
        // on two hosts a flat ring crosses level 1
        let two = ctx(&[2, 2]);
        let ring2 = predict(
            Algo::Ring,
            OpType::AllReduce,
            4,
            1 << 20,
            c.level1,
            c.gamma_us_per_byte,
        )
        .unwrap();
        assert_eq!(
            predict_row(PerfOp::AllReduce, &r, &two),
            Predicted::Ran(ring2)
        );
        match predict_row(PerfOp::AllReduce, &row(8, "AllReduceMeshAivExecutor"), &one) {
            Predicted::Best(name, us) => {
                assert!(name.starts_with("AllReduce"), "{name}");
                assert!(us > 0.0 && us.is_finite());
            }
            other => panic!("{other:?}"),
        }
        let sr = row(64, "SendExecutor");
        assert_eq!(predict_row(PerfOp::SendRecv, &sr, &one), Predicted::None);
        let v = row(64, "AllGatherVMeshExecutor");
        assert_eq!(predict_row(PerfOp::AllGatherV, &v, &one), Predicted::None);
    }

    #[test]
    fn chart_labels_say_what_was_predicted() {
        let rows = vec![
            row(8, "AllReduceMeshAivExecutor"),
            row(64, "AllReduceMeshAivExecutor"),
            row(1 << 20, "AllReduceRingExecutor"),
        ];
        let args = <PerfArgs as clap::Parser>::parse_from(["hccl-test", "all_reduce"]);
        let chart = sweep_chart(&args, PerfOp::AllReduce, &rows, &ctx(&[4]));
        let labels: Vec<&str> = chart.time.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(
            labels[3..],
            [
                "model: AllReduceRing (the executor that ran)",
                "model: best α-β-γ plan AllReduceMesh where AllReduceMeshAiv ran (no formula)"
            ]
        );
        // each model line has a point per row, NaN (a break) where the
        // other one predicts
        let ran = &chart.time[3].points;
        assert_eq!(ran.len(), 3);
        assert!(ran[0].1.is_nan() && ran[1].1.is_nan() && ran[2].1 > 0.0);
        let best = &chart.time[4].points;
        assert!(best[0].1 > 0.0 && best[1].1 > 0.0 && best[2].1.is_nan());
        assert!(chart.footer[0].contains("AllReduceMeshAiv 8 B-64 B, AllReduceRing 1 MiB"));
        assert!(chart.footer[1].contains("parameters test: level 0 α 3.000 µs, 3.000 GB/s"));
        let v = vec![row(64, "AllGatherVMeshExecutor")];
        let chart = sweep_chart(&args, PerfOp::AllGatherV, &v, &ctx(&[4]));
        assert!(chart
            .time
            .iter()
            .any(|s| s.points.is_empty() && s.label.contains("no cost formula")));
    }
}
