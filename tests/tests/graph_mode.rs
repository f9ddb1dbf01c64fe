//! Graph mode with ranks as threads: every primitive (the cases of
//! `hccl_tests::capture`) captured on its own and replayed 100 times, the
//! inputs rewritten between launches and checked after each; captured ops
//! run on the user buffers (the AIV and direct executors, AllToAllV
//! excepted), and capture refuses memory peers cannot map.

use hccl_adapter::{CaptureMode, DataType, DeviceMem, HcclResult, ReduceOp};
use hccl_tests::capture::{capture_and_replay, cases};
use hccl_tests::{comms_with_env, run_ranks};
use std::time::Duration;

fn replay_every_primitive(p: u32, c: usize) {
    let comms = comms_with_env(p, &[]);
    run_ranks(p, Duration::from_secs(150), move |r| {
        let comm = &comms[r as usize];
        for case in cases(comm, c).unwrap() {
            capture_and_replay(comm, std::slice::from_ref(&case), false, 100)
                .unwrap_or_else(|e| panic!("p={p} c={c}: {e}"));
            // every primitive but AllToAllV runs in graph mode
            let executor = comm.communicator().last_executor().unwrap_or_default();
            if case.name != "AllToAllV" {
                assert!(
                    executor.contains("Aiv") || executor.contains("Direct"),
                    "{} p={p} c={c} rank {r}: captured with {executor}",
                    case.name
                );
            }
        }
    });
}

#[test]
fn every_primitive_replayed_small_p2_p3() {
    for p in [2, 3] {
        replay_every_primitive(p, 300);
    }
}

#[test]
fn every_primitive_replayed_small_p4_p8() {
    for p in [4, 8] {
        replay_every_primitive(p, 300);
    }
}

#[test]
fn every_primitive_replayed_large() {
    // 70,000 elements per block: past the AIV kernels, the direct executors
    for p in [2, 3, 4] {
        replay_every_primitive(p, 70_000);
    }
}

/// Capturing an op on private memory is refused, naming the buffer.
#[test]
fn capture_refuses_memory_peers_cannot_map() {
    let p = 2;
    let comms = comms_with_env(p, &[]);
    run_ranks(p, Duration::from_secs(30), move |r| {
        let comm = &comms[r as usize];
        let s = comm.create_stream();
        let private = DeviceMem::alloc(64).unwrap();
        let out = DeviceMem::alloc_shareable(64).unwrap();
        s.begin_capture(CaptureMode::Global).unwrap();
        let e = comm
            .all_reduce_raw(&private, &out, 16, DataType::Fp32, ReduceOp::Sum, &s)
            .unwrap_err();
        assert_eq!(e.code(), HcclResult::EPara, "{e}");
        assert!(e.to_string().contains("sendBuf cannot be captured"), "{e}");
        assert!(e.to_string().contains("private host memory"), "{e}");
        let _ = s.end_capture();
    });
}

/// The template executors (ring, RHD, NHR, NB; forced with `HCCL_ALGO`
/// or by name)
/// run captured AllReduce, AllGather and Broadcast on the user buffers:
/// replayed 30 times with the data checked, the executor named, and the
/// results written straight into the peers' user outputs. Large blocks
/// take several rounds through the CCL output (the AllReduce landing).
#[test]
fn template_executors_replayed_in_graph_mode() {
    let algos = [
        (
            "HCCL_ALGO",
            "level0:ring",
            "Ring",
            &["AllReduce", "AllGather", "Broadcast"][..],
        ),
        // RHD is a level-1 algorithm in HCCL_ALGO: forced by name here
        (
            "HCCL_RS_EXECUTOR",
            "AllReduceRHDExecutor",
            "RHD",
            &["AllReduce"][..],
        ),
        (
            "HCCL_ALGO",
            "level0:NHR",
            "NHR",
            &["AllReduce", "AllGather", "Broadcast"][..],
        ),
        (
            "HCCL_ALGO",
            "level0:NB",
            "NB",
            &["AllReduce", "AllGather", "Broadcast"][..],
        ),
    ];
    for (var, algo, family, ops) in algos {
        for (p, c) in [(2, 300), (3, 70_000), (4, 300_000)] {
            let comms = comms_with_env(p, &[(var, algo), ("HCCL_BUFFSIZE", "1")]);
            run_ranks(p, Duration::from_secs(120), move |r| {
                let comm = &comms[r as usize];
                for case in cases(comm, c).unwrap() {
                    if !ops.contains(&case.name) {
                        continue;
                    }
                    let before = hccl_adapter::peer_access_stats().mapped_write_bytes;
                    capture_and_replay(comm, std::slice::from_ref(&case), false, 30)
                        .unwrap_or_else(|e| panic!("{algo} {} p={p} c={c}: {e}", case.name));
                    let executor = comm.communicator().last_executor().unwrap_or_default();
                    assert!(
                        executor.contains(family) && executor.contains(case.name),
                        "{algo} {} p={p} rank {r}: captured with {executor}",
                        case.name
                    );
                    let wrote = hccl_adapter::peer_access_stats().mapped_write_bytes - before;
                    assert!(
                        wrote > 0,
                        "{executor} p={p}: nothing written into peers' buffers"
                    );
                }
            });
        }
    }
}

/// Consecutive small AllReduces on a capturing stream are recorded as one
/// (gradient bucketing): 64 AllReduces of 64 B on separate buffers make a
/// graph of one op (packed and unpacked); 64 of 16 KiB on separate
/// buffers stay 64 ops (packing them measured slower than running them);
/// the replays reduce every tensor (checked, fresh inputs each launch).
#[test]
fn captured_small_all_reduces_are_fused() {
    for (p, n, ops) in [(2u32, 16, 1), (4, 16, 1), (2, 4096, 64), (4, 4096, 64)] {
        let comms = comms_with_env(p, &[]);
        run_ranks(p, Duration::from_secs(60), move |r| {
            let comm = &comms[r as usize];
            let s = comm.create_stream();
            let bufs: Vec<(DeviceMem, DeviceMem)> = (0..64)
                .map(|_| {
                    let a = DeviceMem::alloc_shareable(n * 4).unwrap();
                    let b = DeviceMem::alloc_shareable(n * 4).unwrap();
                    (a, b)
                })
                .collect();
            s.begin_capture(CaptureMode::Global).unwrap();
            for (a, b) in &bufs {
                comm.all_reduce_raw(a, b, n as u64, DataType::Fp32, ReduceOp::Sum, &s)
                    .unwrap();
            }
            let g = s.end_capture().unwrap();
            assert_eq!(
                g.op_count(),
                ops,
                "p={p} n={n}: 64 AllReduces recorded as {ops}"
            );
            for launch in 0..10u32 {
                for (t, (a, _)) in bufs.iter().enumerate() {
                    let v: Vec<f32> = (0..n)
                        .map(|i| (r * 1000 + t as u32 * 10 + launch + (i % 7) as u32) as f32)
                        .collect();
                    a.copy_from_host(&v).unwrap();
                }
                g.launch(&s).unwrap();
                s.synchronize().unwrap();
                for (t, (_, b)) in bufs.iter().enumerate() {
                    let got = b.to_vec::<f32>(n).unwrap();
                    for (i, g) in got.iter().enumerate().step_by(1 + n / 64) {
                        let want: u32 = (0..p)
                            .map(|q| q * 1000 + t as u32 * 10 + launch + (i % 7) as u32)
                            .sum();
                        assert_eq!(*g, want as f32, "p={p} tensor {t} launch {launch} [{i}]");
                    }
                }
            }
        });
    }
}

/// What a fused run must not swallow: a copy between two AllReduces
/// (recorded in its place, after the first), and an AllReduce whose input
/// is the previous one's output (it needs that result: a run of its own).
#[test]
fn capture_fusion_keeps_stream_order() {
    let p = 2u32;
    let comms = comms_with_env(p, &[]);
    run_ranks(p, Duration::from_secs(60), move |r| {
        let comm = &comms[r as usize];
        let s = comm.create_stream();
        let n = 1000;
        let m: Vec<DeviceMem> = (0..5)
            .map(|_| DeviceMem::alloc_shareable(n * 4).unwrap())
            .collect();
        let (f, sum) = (DataType::Fp32, ReduceOp::Sum);
        s.begin_capture(CaptureMode::Global).unwrap();
        comm.all_reduce_raw(&m[0], &m[1], n as u64, f, sum, &s)
            .unwrap();
        s.memcpy_async(&m[2], &m[1]).unwrap();
        comm.all_reduce_raw(&m[2], &m[3], n as u64, f, sum, &s)
            .unwrap();
        comm.all_reduce_raw(&m[3], &m[4], n as u64, f, sum, &s)
            .unwrap();
        let g = s.end_capture().unwrap();
        assert_eq!(
            g.op_count(),
            3,
            "three runs: the copy and the dependency split them"
        );
        for launch in 0..5 {
            let v: Vec<f32> = (0..n)
                .map(|i| (r + 1 + launch + i as u32 % 3) as f32)
                .collect();
            m[0].copy_from_host(&v).unwrap();
            g.launch(&s).unwrap();
            s.synchronize().unwrap();
            let got = m[4].to_vec::<f32>(n).unwrap();
            for (i, g) in got.iter().enumerate() {
                let base: u32 = (0..p).map(|q| q + 1 + launch + i as u32 % 3).sum();
                assert_eq!(*g, (base * p * p) as f32, "launch {launch} [{i}]");
            }
        }
    });
}

/// Where a fused run's buffers sit in one allocation, back to back (a
/// framework's flat gradient buffer), the fused op reads and writes them
/// in place: no pack or unpack copy is recorded. Every layout — flat in
/// place, flat to flat, flat to scattered, scattered to flat, scattered
/// both ways — replays to the right sums (fresh inputs each launch), and
/// the flat ones record 64 (one side) or 128 (both sides) copy tasks
/// fewer than the scattered one.
#[test]
fn fused_all_reduces_on_adjacent_slices_copy_nothing() {
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Layout {
        FlatInPlace,
        FlatToFlat,
        FlatToScattered,
        ScatteredToFlat,
        Scattered,
    }
    let p = 2u32;
    let comms = comms_with_env(p, &[]);
    run_ranks(p, Duration::from_secs(60), move |r| {
        let comm = &comms[r as usize];
        let s = comm.create_stream();
        // 256 B of f32 each: small enough that a scattered run is packed
        let (n, ops) = (64usize, 64usize);
        let bytes = n * 4;
        let flat = |k: usize| {
            let whole = DeviceMem::alloc_shareable(bytes * ops * k).unwrap();
            (0..ops)
                .map(|t| whole.range(t * bytes, bytes).unwrap())
                .collect::<Vec<_>>()
        };
        let scattered = || {
            (0..ops)
                .map(|_| DeviceMem::alloc_shareable(bytes).unwrap())
                .collect::<Vec<_>>()
        };
        let mut tasks = Vec::new();
        for layout in [
            Layout::Scattered,
            Layout::FlatInPlace,
            Layout::FlatToFlat,
            Layout::FlatToScattered,
            Layout::ScatteredToFlat,
        ] {
            let (ins, outs) = match layout {
                Layout::FlatInPlace => {
                    let f = flat(1);
                    (f.clone(), f)
                }
                Layout::FlatToFlat => (flat(1), flat(1)),
                Layout::FlatToScattered => (flat(1), scattered()),
                Layout::ScatteredToFlat => (scattered(), flat(1)),
                Layout::Scattered => (scattered(), scattered()),
            };
            s.begin_capture(CaptureMode::Global).unwrap();
            for (a, b) in ins.iter().zip(&outs) {
                comm.all_reduce_raw(a, b, n as u64, DataType::Fp32, ReduceOp::Sum, &s)
                    .unwrap();
            }
            let g = s.end_capture().unwrap();
            assert_eq!(g.op_count(), 1, "{layout:?}: one fused op");
            tasks.push((layout, g.task_count()));
            for launch in 0..5u32 {
                for (t, a) in ins.iter().enumerate() {
                    let v: Vec<f32> = (0..n)
                        .map(|i| (r * 100 + t as u32 + launch + (i % 5) as u32) as f32)
                        .collect();
                    a.copy_from_host(&v).unwrap();
                }
                g.launch(&s).unwrap();
                s.synchronize().unwrap();
                for (t, b) in outs.iter().enumerate() {
                    let got = b.to_vec::<f32>(n).unwrap();
                    for (i, g) in got.iter().enumerate().step_by(17) {
                        let want: u32 = (0..p)
                            .map(|q| q * 100 + t as u32 + launch + (i % 5) as u32)
                            .sum();
                        assert_eq!(
                            *g, want as f32,
                            "{layout:?} tensor {t} launch {launch} [{i}]"
                        );
                    }
                }
            }
        }
        // scattered: 64 packing copies, the AllReduce in place on the
        // staging buffer, 64 unpacking copies; a flat side drops its 64
        let count = |l: Layout| tasks.iter().find(|t| t.0 == l).unwrap().1;
        let in_place_op = count(Layout::FlatInPlace);
        assert_eq!(count(Layout::Scattered), in_place_op + 2 * ops, "{tasks:?}");
        assert_eq!(
            count(Layout::ScatteredToFlat),
            in_place_op + ops,
            "{tasks:?}"
        );
        assert_eq!(
            count(Layout::FlatToScattered),
            count(Layout::FlatToFlat) + ops,
            "{tasks:?}"
        );
    });
}
