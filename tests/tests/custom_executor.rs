//! A crate outside hccl-algorithm registers its own executor by name and
//! runs it through the framework and adapter: forced by name when it
//! declares nothing, chosen by the selector where its declared cost is
//! the lowest when it declares one.
//!
//! The executor is a star allreduce: every rank sends its chunk to rank 0,
//! which reduces them and sends the result back. It uses only the public
//! contract: a resource request with mesh links to rank 0, the op-base loop,
//! and link verbs enqueued on the stream.

use hccl_adapter::{CommConfig, DeviceBuffer, HcclComm, ReduceOp};
use hccl_algorithm::template::layout::run_op_base_loop;
use hccl_algorithm::{
    registry, AlgResourceRequest, AlgResourceResponse, CollExecutor, CommPlane, ExecutorInfo,
    OpParam, OpType, SingleSubCommTransport, TopoInfo,
};
use hccl_platform::{MemKind, Result};
use hccl_tests::{expected_value, input_value, run_ranks};
use std::sync::Arc;
use std::time::Duration;

const NAME: &str = "StarAllReduceTestExecutor";

struct StarAllReduce {
    topo: TopoInfo,
}

impl CollExecutor for StarAllReduce {
    fn name(&self) -> &str {
        NAME
    }

    fn calc_res_request(&self, _param: &OpParam, topo: &TopoInfo) -> Result<AlgResourceRequest> {
        let ranks = topo.plane_ranks(CommPlane::Combine);
        let wanted: Vec<u32> = if topo.user_rank == 0 {
            (1..ranks.len() as u32).collect()
        } else {
            vec![0]
        };
        let mut req = AlgResourceRequest::default();
        req.op_transport[CommPlane::Combine as usize].push(SingleSubCommTransport::new(
            ranks,
            topo.user_rank,
            &wanted,
            MemKind::CclInput,
            MemKind::CclOutput,
        )?);
        Ok(req)
    }

    fn orchestrate(&mut self, param: &OpParam, res: &AlgResourceResponse) -> Result<()> {
        let s = &param.stream;
        let comm = res.sub_comm(CommPlane::Combine, 0)?;
        let p = self.topo.user_rank_size;
        run_op_base_loop(param, res, res.ccl_input.len(), |chunk, res| {
            let cin = res.ccl_input.range(0, chunk.bytes)?;
            let cout = res.ccl_output.range(0, chunk.bytes)?;
            s.memcpy_async(&cin, &param.input.range(chunk.offset, chunk.bytes)?)?;
            if self.topo.user_rank == 0 {
                for q in 1..p {
                    let l = comm.link(q)?;
                    l.tx_ack(s)?; // q may write my CCL output
                    l.rx_wait_done(s)?;
                    s.reduce_async(&cin, &cout, param.dtype, param.reduce_op)?;
                }
                for q in 1..p {
                    let l = comm.link(q)?;
                    l.rx_ack(s)?;
                    l.tx_async(MemKind::CclOutput, 0, &cin, s)?;
                    l.tx_wait_done(s)?;
                }
                s.memcpy_async(&param.output.range(chunk.offset, chunk.bytes)?, &cin)
            } else {
                let l = comm.link(0)?;
                l.rx_ack(s)?;
                l.tx_async(MemKind::CclOutput, 0, &cin, s)?;
                l.tx_wait_done(s)?;
                l.tx_ack(s)?; // rank 0 may write the result into my CCL output
                l.rx_wait_done(s)?;
                s.memcpy_async(&param.output.range(chunk.offset, chunk.bytes)?, &cout)
            }
        })
    }
}

#[test]
fn user_executor_runs_through_the_framework() {
    registry()
        .register(
            NAME,
            Arc::new(|t: &TopoInfo| {
                Box::new(StarAllReduce { topo: t.clone() }) as Box<dyn CollExecutor>
            }),
        )
        .unwrap();
    // a second registration under the same name is refused
    let dup = registry().register(
        NAME,
        Arc::new(|t: &TopoInfo| {
            Box::new(StarAllReduce { topo: t.clone() }) as Box<dyn CollExecutor>
        }),
    );
    assert!(dup.unwrap_err().to_string().contains("already registered"));

    let cfg = CommConfig::from_source(
        &[
            ("HCCL_BUFFSIZE", "1"),
            ("HCCL_RS_EXECUTOR", NAME),
            ("HCCL_EXEC_TIMEOUT", "30"),
        ][..],
    )
    .unwrap();
    for p in [2u32, 3, 4] {
        let comms = Arc::new(HcclComm::init_all_with(p, cfg.clone()).unwrap());
        run_ranks(p, Duration::from_secs(60), move |r| {
            let comm = &comms[r as usize];
            let stream = comm.create_stream();
            // more than one CCL buffer (1 MiB) of f32, so the loop chunks
            let count = (1 << 18) + 5;
            for op in [ReduceOp::Sum, ReduceOp::Max] {
                let input: Vec<f32> = (0..count).map(|i| input_value(op, r, i)).collect();
                let send = DeviceBuffer::from_slice(&input).unwrap();
                let mut recv = DeviceBuffer::<f32>::alloc(count).unwrap();
                comm.all_reduce(&send, &mut recv, op, &stream).unwrap();
                stream.synchronize().unwrap();
                let got = recv.to_vec().unwrap();
                for (i, g) in got.iter().enumerate() {
                    assert_eq!(
                        *g,
                        expected_value::<f32>(op, p, i),
                        "p={p} {op} element {i}"
                    );
                }
            }
        });
    }
}

#[test]
fn overriding_with_an_unknown_executor_is_a_clear_error() {
    let cfg = CommConfig::from_source(&[("HCCL_RS_EXECUTOR", "NoSuchExecutor")][..]).unwrap();
    let comms = HcclComm::init_all_with(2, cfg).unwrap();
    let s = comms[0].create_stream();
    let b = DeviceBuffer::from_slice(&[1u8; 4]).unwrap();
    let mut r = DeviceBuffer::<u8>::alloc(4).unwrap();
    let e = comms[0]
        .all_reduce(&b, &mut r, ReduceOp::Sum, &s)
        .unwrap_err();
    assert_eq!(e.code(), hccl_platform::HcclResult::ENotFound);
    assert!(
        e.to_string().contains("'NoSuchExecutor' is not registered"),
        "{e}"
    );
    assert!(s.query());
}

/// Enqueues part of an op and then fails, as an executor with a bug might.
struct FailsHalfway;

impl CollExecutor for FailsHalfway {
    fn name(&self) -> &str {
        "FailsHalfwayTestExecutor"
    }
    fn calc_res_request(&self, _p: &OpParam, _t: &TopoInfo) -> Result<AlgResourceRequest> {
        Ok(AlgResourceRequest::default())
    }
    fn orchestrate(&mut self, param: &OpParam, res: &AlgResourceResponse) -> Result<()> {
        let n = param.input_bytes() as usize;
        param
            .stream
            .memcpy_async(&res.ccl_input.range(0, n)?, &param.input.range(0, n)?)?;
        param
            .stream
            .memcpy_async(&param.output.range(0, n)?, &res.ccl_input.range(0, n)?)?;
        Err(hccl_platform::HcclError::internal(
            "deliberate failure after enqueueing two tasks",
        ))
    }
}

#[test]
fn a_failing_orchestrate_leaves_nothing_enqueued() {
    registry()
        .register(
            "FailsHalfwayTestExecutor",
            Arc::new(|_t: &TopoInfo| Box::new(FailsHalfway) as Box<dyn CollExecutor>),
        )
        .unwrap();
    let cfg = CommConfig::from_source(
        &[
            ("HCCL_BUFFSIZE", "1"),
            ("HCCL_RS_EXECUTOR", "FailsHalfwayTestExecutor"),
        ][..],
    )
    .unwrap();
    let comms = HcclComm::init_all_with(2, cfg).unwrap();
    let s = comms[0].create_stream();
    let send = DeviceBuffer::from_slice(&[5i32; 16]).unwrap();
    let mut recv = DeviceBuffer::<i32>::alloc(16).unwrap();
    let e = comms[0]
        .all_reduce(&send, &mut recv, ReduceOp::Sum, &s)
        .unwrap_err();
    assert_eq!(e.code(), hccl_platform::HcclResult::EInternal);
    assert!(e.to_string().contains("deliberate failure"), "{e}");
    assert_eq!(e.context().rank, Some(0));
    assert!(s.query(), "the half-enqueued op must have been rolled back");
    s.synchronize().unwrap();
    assert_eq!(recv.to_vec().unwrap(), vec![0; 16], "nothing may have run");
}

#[test]
fn hccl_algo_picks_the_algorithm_and_rejects_what_is_missing() {
    // level0 is what counts on one server
    for (algo, want) in [
        ("level0:ring;level1:NA", "AllReduceRingExecutor"),
        ("level0:fullmesh", "AllReduceMeshExecutor"),
    ] {
        let cfg = CommConfig::from_source(&[("HCCL_ALGO", algo)][..]).unwrap();
        let comms = Arc::new(HcclComm::init_all_with(2, cfg).unwrap());
        let c2 = comms.clone();
        run_ranks(2, Duration::from_secs(30), move |r| {
            let c = &c2[r as usize];
            let s = c.create_stream();
            let send = DeviceBuffer::from_slice(&[r as f32 + 1.0; 8]).unwrap();
            let mut recv = DeviceBuffer::<f32>::alloc(8).unwrap();
            c.all_reduce(&send, &mut recv, ReduceOp::Sum, &s).unwrap();
            s.synchronize().unwrap();
            assert_eq!(recv.to_vec().unwrap(), vec![3.0; 8]);
        });
        assert_eq!(
            comms[0].communicator().last_executor().as_deref(),
            Some(want),
            "{algo}"
        );
    }
    // a valid HCCL algorithm hccl-rs lacks for this op is a clear error
    let cfg = CommConfig::from_source(&[("HCCL_ALGO", "allgather=level0:star")][..]).unwrap();
    let comms = HcclComm::init_all_with(2, cfg).unwrap();
    let s = comms[0].create_stream();
    let b = hccl_adapter::DeviceMem::alloc(16).unwrap();
    let r = hccl_adapter::DeviceMem::alloc(16).unwrap();
    let e = comms[0]
        .all_gather_raw(&b, &r, 2, hccl_adapter::DataType::Int32, &s)
        .unwrap_err();
    assert_eq!(e.code(), hccl_platform::HcclResult::ENotSupport);
    assert!(
        e.to_string()
            .contains("HCCL_ALGO asks for level0 algorithm 'star' for allgather"),
        "{e}"
    );
    // and a malformed value is refused when the configuration is read
    let e = CommConfig::from_source(&[("HCCL_ALGO", "level1:warp")][..]).unwrap_err();
    assert!(e.to_string().contains("HCCL_ALGO='level1:warp'"), "{e}");
}

/// The star allreduce again, registered with a declaration instead of
/// forced by name.
const DECLARED: &str = "StarAllReduceDeclaredTestExecutor";

/// Where the declared star claims to beat every built-in: model sizes of
/// 32–128 KiB (above the AIV boards' 16 KiB, below direct read's 256 KiB).
const FAST: std::ops::RangeInclusive<u64> = (32 << 10)..=(128 << 10);

/// The star's declaration: one host only; in [`FAST`] a single α step (as
/// if it had measured a fast path there), elsewhere its honest α-β-γ
/// terms (the root receives, reduces and sends p − 1 copies), which lose to
/// the built-ins.
fn star_info() -> ExecutorInfo {
    ExecutorInfo::from_terms(&[OpType::AllReduce], |q| {
        let (p, n) = (q.ranks() as f64, q.bytes as f64);
        Some(if FAST.contains(&q.bytes) {
            (1.0, 0.0, 0.0)
        } else {
            (2.0, 2.0 * (p - 1.0) * n, (p - 1.0) * n)
        })
    })
    .serving(|q| q.hosts() == 1)
}

/// Runs one f32 Sum allreduce of `count` elements per rank on `comms` and
/// checks it against the reference; returns the executor that ran it.
fn allreduce_on(comms: &Arc<Vec<HcclComm>>, count: usize) -> String {
    let p = comms.len() as u32;
    let c = comms.clone();
    run_ranks(p, Duration::from_secs(60), move |r| {
        let comm = &c[r as usize];
        let stream = comm.create_stream();
        let op = ReduceOp::Sum;
        let input: Vec<f32> = (0..count).map(|i| input_value(op, r, i)).collect();
        let send = DeviceBuffer::from_slice(&input).unwrap();
        let mut recv = DeviceBuffer::<f32>::alloc(count).unwrap();
        comm.all_reduce(&send, &mut recv, op, &stream).unwrap();
        stream.synchronize().unwrap();
        for (i, g) in recv.to_vec().unwrap().iter().enumerate() {
            assert_eq!(*g, expected_value::<f32>(op, p, i), "p={p} element {i}");
        }
    });
    let ran: Vec<String> = comms
        .iter()
        .map(|c| c.communicator().last_executor().unwrap_or_default())
        .collect();
    assert!(ran.windows(2).all(|w| w[0] == w[1]), "{ran:?}");
    ran[0].clone()
}

/// A user executor whose declared cost beats the built-ins for a size
/// range is chosen there by the selector without any override, and the
/// built-ins keep every other size and the multi-host topology, which it
/// does not serve.
#[test]
fn a_declared_executor_wins_where_its_cost_is_lowest() {
    registry()
        .register_with(
            DECLARED,
            Arc::new(|t: &TopoInfo| {
                Box::new(StarAllReduce { topo: t.clone() }) as Box<dyn CollExecutor>
            }),
            star_info(),
        )
        .unwrap();
    let cfg = CommConfig::from_source(&[("HCCL_BUFFSIZE", "1"), ("HCCL_EXEC_TIMEOUT", "30")][..])
        .unwrap();
    assert!(cfg.executor_override.is_none() && cfg.algo == Default::default());
    for p in [2u32, 3, 4] {
        let comms = Arc::new(HcclComm::init_all_with(p, cfg.clone()).unwrap());
        // f32 elements: 4 KiB, 32 KiB, 64 KiB + 4, 128 KiB, 192 KiB, 2 MiB
        for (count, inside) in [
            (1 << 10, false),
            (8 << 10, true),
            ((16 << 10) + 1, true),
            (32 << 10, true),
            (48 << 10, false),
            (512 << 10, false),
        ] {
            let ran = allreduce_on(&comms, count);
            assert_eq!(FAST.contains(&(4 * count as u64)), inside);
            if inside {
                assert_eq!(ran, DECLARED, "p={p} count={count}");
            } else {
                assert_ne!(ran, DECLARED, "p={p} count={count}");
                assert!(registry().contains(&ran), "{ran}");
            }
        }
    }
    // two hosts: not served, whatever the size
    let comms = Arc::new(HcclComm::init_all_on_hosts(vec![0, 0, 1, 1], cfg).unwrap());
    assert_ne!(allreduce_on(&comms, 16 << 10), DECLARED);
}
