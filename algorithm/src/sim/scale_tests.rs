//! The simulator's data modes: symbolic data agrees with bytes on the
//! built-in executors, and a broken plan (a dropped, duplicated or
//! misplaced contribution) is caught in both modes with a clear message.

use super::*;
use crate::executor::CollExecutor;
use crate::registry;
use crate::resource::AlgResourceRequest;

/// Registered executors and the op each serves.
fn executors_by_op() -> Vec<(String, OpType)> {
    let reg = registry();
    reg.names()
        .into_iter()
        .filter_map(|n| Some((n.clone(), reg.op_of(&n)?)))
        .collect()
}

/// `op` of `count` elements on hosts of `hosts` ranks: root in the middle,
/// uneven V blocks and an uneven AllToAllV matrix (empty ones included).
pub(super) fn spec_for(op: OpType, hosts: &[u32], count: u64) -> SimSpec {
    let p: u32 = hosts.iter().sum();
    let mut spec = SimSpec::op(op, p, count, DataType::Fp32, ReduceOp::Sum).on_hosts(hosts);
    spec.root = p / 2;
    spec.v_counts = Some(
        (0..p as u64)
            .map(|r| (count + r * 3) % (count + 5))
            .collect(),
    );
    spec.matrix = Some(
        (0..p as u64)
            .map(|r| {
                (0..p as u64)
                    .map(|q| (count + r * 5 + q * 3) % (count + 4))
                    .collect()
            })
            .collect(),
    );
    spec
}

/// An op-base AllGather or ReduceScatter whose round holds whole rank
/// blocks copies the p blocks between the user and the CCL buffer in one
/// task per rank, not one per block: a plan of p ranks runs well under p²
/// tasks (a copy per block was p² alone), with the result checked on
/// bytes, and the same without whole blocks (several rounds, a copy per
/// block again) still checked.
#[test]
fn whole_block_rounds_copy_the_blocks_once() {
    let p = 128u32;
    for name in [
        "AllGatherNHRExecutor",
        "ReduceScatterNHRExecutor",
        "AllGatherRHDExecutor",
        "ReduceScatterRHDExecutor",
    ] {
        let op = registry().op_of(name).unwrap();
        let spec = SimSpec::op(op, p, 4, DataType::Fp32, ReduceOp::Sum).with_data(DataMode::Bytes);
        let rep = simulate(registry(), name, &spec).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(rep.checked, "{name}");
        assert!(
            rep.tasks < (p * p) as u64 / 2,
            "{name}: {} tasks for {p} ranks",
            rep.tasks
        );
        // 2 elements per rank block per round: two rounds of strided windows
        let mut small = spec.clone();
        small.ccl_buffer_size = Some(p as usize * 2 * 4);
        let rep2 = simulate(registry(), name, &small).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            rep2.checked && rep2.tasks > (p * p) as u64,
            "{name}: {}",
            rep2.tasks
        );
    }
}

/// Every executor that runs on bytes runs on symbols with the same report
/// (steps, traffic per link and plane, tasks, reduce volume): the data
/// mode changes what a buffer holds, never the plan. Executors that need
/// bytes (AIV kernels; reads of peers' buffers by address) are retried
/// on bytes by `DataMode::Auto` and refused by `DataMode::Symbolic`.
#[test]
fn symbolic_data_agrees_with_bytes_on_every_executor() {
    let mut compared = 0;
    for (name, op) in executors_by_op() {
        for hosts in [&[1u32][..], &[2], &[3], &[2, 3], &[4, 4]] {
            for count in [0u64, 1, 7, 300] {
                let spec = spec_for(op, hosts, count);
                let Ok(bytes) =
                    simulate(registry(), &name, &spec.clone().with_data(DataMode::Bytes))
                else {
                    continue; // not for this topology or op
                };
                let sym = simulate(
                    registry(),
                    &name,
                    &spec.clone().with_data(DataMode::Symbolic),
                );
                let sym = match sym {
                    Ok(s) => s,
                    Err(e) if name.contains("Direct") || name.contains("Aiv") => {
                        // needs bytes: said so, not a wrong result
                        assert!(
                            !matches!(
                                e,
                                SimFailure::WrongSymbol { .. } | SimFailure::WrongResult { .. }
                            ),
                            "{name}: {e}"
                        );
                        continue;
                    }
                    Err(e) => panic!("{name} hosts={hosts:?} count={count}: {e}"),
                };
                assert!(sym.symbolic && !bytes.symbolic);
                assert_eq!(
                    SimReport {
                        symbolic: false,
                        ..sym
                    },
                    bytes,
                    "{name} hosts={hosts:?} count={count}"
                );
                compared += 1;
            }
        }
    }
    assert!(compared > 300, "only {compared} cases compared");
}

#[test]
fn auto_mode_keeps_bytes_for_small_plans_and_symbols_for_large_ones() {
    let small = SimSpec::all_reduce(8, 1000, DataType::Fp32, ReduceOp::Sum);
    let r = simulate(registry(), "AllReduceRingExecutor", &small).unwrap();
    assert!(r.checked && !r.symbolic);
    // 4 ranks × 2 buffers × 64 MiB: over SYMBOLIC_ABOVE_BYTES, and cheap
    // as symbols (each buffer is a handful of runs)
    let big = SimSpec::all_reduce(4, 16 << 20, DataType::Fp32, ReduceOp::Sum);
    let r = simulate(registry(), "AllReduceRingExecutor", &big).unwrap();
    assert!(r.checked && r.symbolic);
    // forced either way
    let r = simulate(
        registry(),
        "AllReduceRingExecutor",
        &small.with_data(DataMode::Symbolic),
    )
    .unwrap();
    assert!(r.checked && r.symbolic);
}

/// How a [`Faulty`] executor breaks the plan on its victim rank.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// The victim's input is overwritten with memory nothing wrote (zeros
    /// in byte mode) before the op: its contribution never arrives.
    Drop,
    /// After the op, the victim adds its input once more (AllReduce) or
    /// copies block 0 over block 1 (AllGather).
    Duplicate,
    /// Before the op, the victim's first half of input is overwritten by
    /// its second half: a block taken from the wrong offset.
    WrongSlice,
}

const VICTIM: u32 = 5;

/// A real executor with one fault on rank [`VICTIM`], made only of
/// copy and reduce tasks on the granted buffers.
struct Faulty {
    inner: Box<dyn CollExecutor>,
    fault: Fault,
    me: u32,
}

impl CollExecutor for Faulty {
    fn name(&self) -> &str {
        "Faulty"
    }
    fn calc_res_request(
        &self,
        param: &OpParam,
        topo: &TopoInfo,
    ) -> hccl_platform::Result<AlgResourceRequest> {
        self.inner.calc_res_request(param, topo)
    }
    fn orchestrate(
        &mut self,
        param: &OpParam,
        res: &AlgResourceResponse,
    ) -> hccl_platform::Result<()> {
        let s = &param.stream;
        let len = param.input.len();
        let victim = self.me == VICTIM;
        if victim {
            match self.fault {
                Fault::Drop => s.memcpy_async(&param.input, &res.ccl_output.range(0, len)?)?,
                Fault::WrongSlice => {
                    let half = len / 2 / 4 * 4;
                    s.memcpy_async(
                        &param.input.range(0, half)?,
                        &param.input.range(half, half)?,
                    )?
                }
                Fault::Duplicate => {}
            }
        }
        self.inner.orchestrate(param, res)?;
        if victim {
            if let Fault::Duplicate = self.fault {
                if param.op_type == OpType::AllGather {
                    let b = param.input.len();
                    s.memcpy_async(&param.output.range(b, b)?, &param.output.range(0, b)?)?;
                } else {
                    s.reduce_async(&param.output, &param.input, param.dtype, param.reduce_op)?;
                }
            }
        }
        Ok(())
    }
}

fn faulty(inner: &'static str, fault: Fault) -> ExecutorRegistry {
    let reg = ExecutorRegistry::with_builtins();
    reg.register(
        "Faulty",
        Arc::new(move |t: &TopoInfo| {
            Box::new(Faulty {
                inner: registry().create(inner, t).unwrap(),
                fault,
                me: t.user_rank,
            }) as Box<dyn CollExecutor>
        }),
    )
    .unwrap();
    reg
}

/// Runs the faulty `inner` on `p` ranks in `mode` and returns the failure.
/// (602 elements: a shift by a multiple of the byte pattern's period of 5
/// elements would go unseen in byte mode; symbols see every shift.)
fn broken(inner: &'static str, op: OpType, fault: Fault, p: u32, mode: DataMode) -> SimFailure {
    let spec = SimSpec::op(op, p, 602, DataType::Fp32, ReduceOp::Sum).with_data(mode);
    let reg = faulty(inner, fault);
    simulate(&reg, "Faulty", &spec).expect_err("a broken plan passed the check")
}

/// The symbolic message, checked to name what is wrong.
fn symbolic_detail(e: SimFailure) -> (u32, String) {
    match e {
        SimFailure::WrongSymbol { rank, detail, .. } => (rank, detail),
        e => panic!("expected a symbolic wrong result, got: {e}"),
    }
}

fn assert_bytes_catch(e: SimFailure) {
    assert!(matches!(e, SimFailure::WrongResult { .. }), "{e}");
}

// Symbolic mode at 256 ranks (bytes not kept), byte mode at 8.

#[test]
fn a_dropped_contribution_is_caught_and_named() {
    for inner in [
        "AllReduceNHRExecutor",
        "AllReduceRHDExecutor",
        "AllReduceRingExecutor",
    ] {
        let e = broken(
            inner,
            OpType::AllReduce,
            Fault::Drop,
            256,
            DataMode::Symbolic,
        );
        let (_, detail) = symbolic_detail(e);
        assert_eq!(
            detail,
            format!("1 of 256 contributions missing: rank {VICTIM}'s"),
            "{inner}"
        );
        assert_bytes_catch(broken(
            inner,
            OpType::AllReduce,
            Fault::Drop,
            8,
            DataMode::Bytes,
        ));
    }
}

#[test]
fn a_duplicated_contribution_is_caught_and_named() {
    for inner in ["AllReduceNHRExecutor", "AllReduceNBExecutor"] {
        let e = broken(
            inner,
            OpType::AllReduce,
            Fault::Duplicate,
            256,
            DataMode::Symbolic,
        );
        let (rank, detail) = symbolic_detail(e);
        assert_eq!(rank, VICTIM);
        assert_eq!(
            detail,
            format!("1 contribution(s) duplicated: rank {VICTIM}'s"),
            "{inner}"
        );
        assert_bytes_catch(broken(
            inner,
            OpType::AllReduce,
            Fault::Duplicate,
            8,
            DataMode::Bytes,
        ));
    }
    let e = broken(
        "AllGatherNHRExecutor",
        OpType::AllGather,
        Fault::Duplicate,
        256,
        DataMode::Symbolic,
    );
    let (rank, detail) = symbolic_detail(e);
    assert_eq!(rank, VICTIM);
    assert_eq!(
        detail,
        "holds rank 0's element 0 where rank 1's element 0 belongs"
    );
    assert_bytes_catch(broken(
        "AllGatherNHRExecutor",
        OpType::AllGather,
        Fault::Duplicate,
        8,
        DataMode::Bytes,
    ));
}

#[test]
fn a_wrong_slice_is_caught_and_named() {
    let e = broken(
        "AllReduceRHDExecutor",
        OpType::AllReduce,
        Fault::WrongSlice,
        256,
        DataMode::Symbolic,
    );
    let (_, detail) = symbolic_detail(e);
    assert!(detail.ends_with("(a wrong slice)"), "{detail}");
    assert_bytes_catch(broken(
        "AllReduceRHDExecutor",
        OpType::AllReduce,
        Fault::WrongSlice,
        8,
        DataMode::Bytes,
    ));
    let e = broken(
        "AllGatherRingExecutor",
        OpType::AllGather,
        Fault::WrongSlice,
        256,
        DataMode::Symbolic,
    );
    let (_, detail) = symbolic_detail(e);
    assert_eq!(
        detail,
        format!("holds rank {VICTIM}'s element 301 where rank {VICTIM}'s element 0 belongs")
    );
    assert_bytes_catch(broken(
        "AllGatherRingExecutor",
        OpType::AllGather,
        Fault::WrongSlice,
        8,
        DataMode::Bytes,
    ));
}
