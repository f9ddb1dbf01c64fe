//! The read-based verbs over an in-process link: buffers registered with
//! the rank's communicator (its device's uid) are reached through their
//! mapping (here: the region itself), others with cross-memory attach;
//! `RxReduce` fuses the read and the reduction; `TxAsync` into the peer's
//! `PARAM_OUTPUT` writes its user buffer.

use crate::dtype::{DataType, ReduceOp};
use crate::link::{InProcEndpoint, InProcLink, LinkHandle};
use crate::mem::{cma, peer_access_stats, DeviceMem, MemKind};
use crate::stream::{Device, DeviceConfig, Stream};
use crate::sync::Arc;
use crate::HcclResult;

struct Rank {
    dev: Device,
    s: Stream,
    link: LinkHandle,
    input: DeviceMem,
    output: DeviceMem,
}

/// Two ranks (threads' worth, driven from this one) with `n` f32 of input
/// (rank r: r*1000 + i) and output each, shareable; `register` registers
/// them with each rank's communicator (its device).
fn pair(n: usize, register: bool) -> (Rank, Rank) {
    let devs = [0u32, 1].map(|r| Device::new(r, DeviceConfig::default()));
    let ep = |r: u32| InProcEndpoint {
        rank: r,
        mems: vec![],
        waker: devs[r as usize].waker(),
        board: None,
    };
    let (a, b) = InProcLink::pair(&ep(0), &ep(1));
    let [d0, d1] = devs;
    let rank = |dev: Device, link: InProcLink, r: u32| {
        let input = DeviceMem::alloc_shareable(n * 4).unwrap();
        input
            .copy_from_host(
                &(0..n)
                    .map(|i| (r * 1000) as f32 + i as f32)
                    .collect::<Vec<_>>(),
            )
            .unwrap();
        let output = DeviceMem::alloc_shareable(n * 4).unwrap();
        if register {
            input.register_in(dev.uid()).unwrap();
            output.register_in(dev.uid()).unwrap();
        }
        Rank {
            s: Stream::new(&dev),
            dev,
            link: LinkHandle::new(Arc::new(link)),
            input,
            output,
        }
    };
    (rank(d0, a, 0), rank(d1, b, 1))
}

/// Both ranks tell each other where their buffers are; rank 0 takes rank 1's.
fn exchange(r0: &Rank, r1: &Rank) {
    r1.link
        .expose_param_mem(&r1.input, &r1.output, &r1.s)
        .unwrap();
    r1.s.synchronize().unwrap();
    r0.link.rx_param_mem(&r0.s).unwrap();
}

fn want_sum(n: usize, at: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (at + i) as f32 + (1000 + at + i) as f32)
        .collect()
}

#[test]
fn registered_buffers_are_read_reduced_and_written_through_the_mapping() {
    if !cma::permitted() {
        return; // the read-based verbs need cross-memory attach as their fallback
    }
    let n = 100_000;
    let (r0, r1) = pair(n, true);
    assert!(r0.link.link().maps_peer_param());
    exchange(&r0, &r1);
    let before = peer_access_stats();
    // read rank 1's input, elements 10..20
    let got = DeviceMem::alloc(40).unwrap();
    r0.link
        .read_peer(MemKind::ParamInput, 40, &got, &r0.s)
        .unwrap();
    // rank 0's input += rank 1's input, fused, all of it
    r0.link
        .read_peer_reduce(
            MemKind::ParamInput,
            0,
            &r0.input,
            DataType::Fp32,
            ReduceOp::Sum,
            &r0.s,
        )
        .unwrap();
    // write straight into rank 1's user output
    r0.link
        .tx_async(
            MemKind::ParamOutput,
            8,
            &r0.input.range(0, 16).unwrap(),
            &r0.s,
        )
        .unwrap();
    r0.s.synchronize().unwrap();
    let after = peer_access_stats();
    assert_eq!(
        got.to_vec::<f32>(10).unwrap(),
        (1010..1020).map(|v| v as f32).collect::<Vec<_>>()
    );
    assert_eq!(r0.input.to_vec::<f32>(n).unwrap(), want_sum(n, 0));
    assert_eq!(r1.output.to_vec::<f32>(6).unwrap()[2..], want_sum(4, 0)[..]);
    assert_eq!(after.mapped_reads - before.mapped_reads, 2);
    assert_eq!(
        after.mapped_read_bytes - before.mapped_read_bytes,
        40 + 4 * n as u64
    );
    assert_eq!(after.mapped_writes - before.mapped_writes, 1);
    assert_eq!(after.cma_reads, before.cma_reads, "no cross-memory read");
    // the fused verb counts as reduced bytes, as a reduce task does
    assert!(r0.dev.stats().reduce_bytes >= 4 * n as u64);
    // a read past the peer's announced buffer is refused, nothing read
    let e = {
        r0.link
            .read_peer(MemKind::ParamInput, 4 * n - 8, &got, &r0.s)
            .unwrap();
        r0.s.synchronize().unwrap_err()
    };
    assert!(
        e.to_string()
            .contains("overruns the peer's PARAM_INPUT buffer"),
        "{e}"
    );
    drop(r1);
}

#[test]
fn unregistered_buffers_are_read_with_cross_memory_attach_through_a_bounded_window() {
    if !cma::permitted() {
        return;
    }
    // more than one staging window (256 KiB) of f32
    let n = 200_000;
    let (r0, r1) = pair(n, false);
    exchange(&r0, &r1);
    let before = peer_access_stats();
    r0.link
        .read_peer_reduce(
            MemKind::ParamInput,
            0,
            &r0.input,
            DataType::Fp32,
            ReduceOp::Sum,
            &r0.s,
        )
        .unwrap();
    r0.s.synchronize().unwrap();
    let after = peer_access_stats();
    assert_eq!(r0.input.to_vec::<f32>(n).unwrap(), want_sum(n, 0));
    assert_eq!(after.mapped_reads, before.mapped_reads);
    assert_eq!(
        after.cma_reads - before.cma_reads,
        (4 * n as u64).div_ceil(256 << 10)
    );
    assert_eq!(after.cma_read_bytes - before.cma_read_bytes, 4 * n as u64);
    // writing into an unmapped peer user buffer is refused, naming why
    r0.link
        .tx_async(
            MemKind::ParamOutput,
            0,
            &r0.input.range(0, 8).unwrap(),
            &r0.s,
        )
        .unwrap();
    let e = r0.s.synchronize().unwrap_err();
    assert_eq!(e.code(), HcclResult::ENotSupport, "{e}");
    assert!(
        e.to_string()
            .contains("PARAM_OUTPUT buffer: it is not mapped"),
        "{e}"
    );
    assert_eq!(r1.output.to_vec::<f32>(2).unwrap(), vec![0.0, 0.0]);
}

#[test]
fn memory_registered_with_another_communicator_sends_no_handle() {
    if !cma::permitted() {
        return;
    }
    let n = 1000;
    let (r0, r1) = pair(n, false);
    // registered, but with rank 0's communicator, not rank 1's
    r1.input.register_in(r0.dev.uid()).unwrap();
    exchange(&r0, &r1);
    let before = peer_access_stats();
    let got = DeviceMem::alloc(4 * n).unwrap();
    r0.link
        .read_peer(MemKind::ParamInput, 0, &got, &r0.s)
        .unwrap();
    r0.s.synchronize().unwrap();
    let after = peer_access_stats();
    assert_eq!(after.cma_reads - before.cma_reads, 1);
    assert_eq!(after.mapped_reads, before.mapped_reads);
    assert_eq!(got.to_vec::<f32>(2).unwrap(), vec![1000.0, 1001.0]);
}
