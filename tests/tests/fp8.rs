//! HCCL's FP8 types (HIF8, FP8E4M3, FP8E5M2, FP8E8M0), ranks as threads:
//! AllGather(V), Broadcast, AllToAll(V), Scatter, Gather, Send/Recv and
//! BatchSendRecv carry each type byte for byte (small ops take the AIV
//! kernels, large ones the ring/mesh executors, chunked through 1 MiB CCL
//! buffers, and hierarchical executors on two declared hosts); AllReduce,
//! Reduce and ReduceScatter(V) refuse them with HCCL_E_NOT_SUPPORT,
//! enqueuing nothing. The checks are `hccl_tests::fp8`, which the rank
//! processes of `multiprocess.rs` run too.

use hccl_adapter::{CommConfig, HcclComm};
use hccl_tests::run_ranks;
use std::sync::Arc;
use std::time::Duration;

const SIZES: &[usize] = &[1, 1000, 300_001];

fn run_all(comms: Arc<Vec<HcclComm>>) {
    let p = comms.len() as u32;
    run_ranks(p, Duration::from_secs(150), move |r| {
        hccl_tests::fp8::run(&comms[r as usize], SIZES).unwrap_or_else(|e| panic!("rank {r}: {e}"));
    });
}

#[test]
fn fp8_types_move_and_refuse_reductions_at_4_threads() {
    run_all(hccl_tests::comms_with_env(4, &[("HCCL_BUFFSIZE", "1")]));
}

#[test]
fn fp8_types_on_two_declared_hosts() {
    let config =
        CommConfig::from_source(&[("HCCL_EXEC_TIMEOUT", "20"), ("HCCL_BUFFSIZE", "1")][..])
            .unwrap();
    let comms = HcclComm::init_all_on_hosts(vec![0, 0, 1, 1], config).unwrap();
    run_all(Arc::new(comms));
}
