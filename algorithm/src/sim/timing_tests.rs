//! The timed simulation ([`SimSpec::cost`]) against the selector's cost
//! formulas: one model, two ways of evaluating it.

use super::*;
use crate::cost::{CostParams, LinkParams};
use crate::executor::SelectQuery;
use crate::registry;

/// Level 1 at 1 Gbit/s (0.125 GB/s), as the namespace hosts' benchmark.
fn params(host_gbps: Option<f64>) -> CostParams {
    CostParams {
        level0: LinkParams::new(2.0, 4.0),
        level1: LinkParams::new(20.0, 0.125),
        gamma_us_per_byte: 1.0 / 8e3,
        host_gbps,
    }
}

/// (simulator's prediction, selector's formula), µs, of `name`'s 1 MiB
/// AllReduce on hosts of `hosts` ranks.
fn both(name: &str, hosts: &[u32], c: CostParams) -> (f64, f64) {
    let p: u32 = hosts.iter().sum();
    let bytes = 1u64 << 20;
    let spec = SimSpec::all_reduce(p, bytes / 4, DataType::Fp32, ReduceOp::Sum)
        .on_hosts(hosts)
        .timed(c);
    let r = simulate(registry(), name, &spec).unwrap();
    let topo = TopoInfo::new(0, spec.rank_to_server.clone()).unwrap();
    let q = SelectQuery::new(OpType::AllReduce, &topo, bytes, &c, Default::default());
    let est = registry().info(name).unwrap().estimate(&q).unwrap();
    (r.predicted_ns.unwrap() as f64 / 1e3, est.micros)
}

/// The flat ring across hosts: every step waits for the slowest link, so
/// the timed plan is the formula's 2(p−1)(α + n/p·β) + γ term exactly
/// where slices are even.
#[test]
fn a_timed_ring_across_hosts_is_the_formula() {
    for (hosts, tol) in [
        (vec![1u32, 1], 1e-6),
        (vec![2, 2], 1e-6),
        (vec![2, 1, 3], 1e-3),
    ] {
        for cap in [None, Some(0.125)] {
            let (sim, formula) = both("AllReduceRingExecutor", &hosts, params(cap));
            assert!(
                (sim / formula - 1.0).abs() <= tol,
                "{hosts:?} {cap:?}: simulated {sim} µs, formula {formula} µs"
            );
        }
    }
}

/// The hierarchical and multi-ring executors: the formulas (levels in
/// turn, the busiest rank's bytes, the busiest host link at its
/// capacity) agree with the timed plan within 10%, with and without a
/// shared host link; Pipeline on uneven hosts within 35% (its formula
/// assumes every level-1 step overlaps a level-0 step of equal length).
#[test]
fn the_selector_formulas_agree_with_the_timed_simulator() {
    for (name, hosts, tol) in [
        ("AllReduceTwoLevelExecutor", vec![2u32, 2], 0.10),
        ("AllReduceTwoLevelExecutor", vec![2, 1, 3], 0.10),
        ("AllReducePipelineExecutor", vec![2, 2], 0.10),
        ("AllReducePipelineExecutor", vec![2, 1, 3], 0.35),
        ("AllReduceMultiRingExecutor", vec![2, 2], 0.10),
        ("AllReduceMultiRingExecutor", vec![2, 1, 3], 0.10),
    ] {
        for cap in [None, Some(0.125)] {
            let (sim, formula) = both(name, &hosts, params(cap));
            assert!(
                (formula / sim - 1.0).abs() <= tol,
                "{name} {hosts:?} {cap:?}: simulated {sim:.1} µs, formula {formula:.1} µs"
            );
        }
    }
}

/// TwoLevel on 2 + 2 runs two level-1 allreduces at once, one per rank
/// index: with the host link no faster than one flow, they share it and
/// the level-1 phase takes about twice as long; the busiest host link is
/// reported with its bytes and busy time.
#[test]
fn flows_crossing_one_host_link_share_it() {
    let name = "AllReduceTwoLevelExecutor";
    let (alone, _) = both(name, &[2, 2], params(None));
    let (shared, _) = both(name, &[2, 2], params(Some(0.125)));
    // level 1 alone: 2 ranks' allreduce of half the data each, 2 steps of
    // a quarter MiB at 0.125 GB/s ≈ 4.2 ms; shared, about 8.4 ms
    assert!(
        shared - alone > 3_500.0 && shared - alone < 5_000.0,
        "alone {alone:.1} µs, shared {shared:.1} µs"
    );
    let spec = SimSpec::all_reduce(4, 1 << 18, DataType::Fp32, ReduceOp::Sum)
        .on_hosts(&[2, 2])
        .timed(params(Some(0.125)));
    let r = simulate(registry(), name, &spec).unwrap();
    let busiest = r.busiest_host_link.unwrap();
    // both hosts send each rank's half of the data once per level-1 step
    assert_eq!(busiest.bytes, 1 << 20, "{busiest:?}");
    assert_eq!(
        busiest.busy_ns,
        (busiest.bytes as f64 / 0.125).round() as u64
    );
    // one host: no host link
    let one = SimSpec::all_reduce(4, 1 << 10, DataType::Fp32, ReduceOp::Sum).timed(params(None));
    let r = simulate(registry(), "AllReduceRingExecutor", &one).unwrap();
    assert_eq!(r.busiest_host_link, None);
    assert!(r.predicted_ns.unwrap() > 0);
}

/// Without cost parameters nothing is predicted; with a timeline asked
/// for, the transfers and reduces come out as Perfetto JSON whose spans
/// end by the predicted time.
#[test]
fn a_timed_plan_gives_a_timeline() {
    let plain = SimSpec::all_reduce(4, 1024, DataType::Fp32, ReduceOp::Sum).on_hosts(&[2, 2]);
    let r = simulate(registry(), "AllReduceRingExecutor", &plain).unwrap();
    assert_eq!(r.predicted_ns, None);
    assert!(r.timeline.is_empty());
    let spec = SimSpec {
        timeline_events: 1000,
        ..plain.timed(params(Some(0.125)))
    };
    let r = simulate(registry(), "AllReduceRingExecutor", &spec).unwrap();
    let end = r.predicted_ns.unwrap();
    // a ring AllReduce on 4 ranks: 6 sends and 3 reduces per rank
    let sends = r.timeline.iter().filter(|e| e.what == "send").count();
    assert_eq!(sends, 4 * 6);
    assert!(r.timeline.iter().all(|e| e.start_ns + e.dur_ns <= end));
    let json: serde_json::Value = serde_json::from_str(&timeline_json(&r.timeline)).unwrap();
    assert_eq!(
        json["traceEvents"].as_array().unwrap().len(),
        r.timeline.len()
    );
    let small = SimSpec {
        timeline_events: 5,
        ..spec
    };
    let r = simulate(registry(), "AllReduceRingExecutor", &small).unwrap();
    assert_eq!(r.timeline.len(), 5);
    assert!(r.timeline_dropped > 0);
}
