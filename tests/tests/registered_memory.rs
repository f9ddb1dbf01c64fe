//! Memory peers address (registration, symmetric windows), ranks as
//! threads: the direct executors on registered buffers give correct
//! results and reach the peers' buffers through their mapping (no
//! cross-memory read), on unregistered ones through cross-memory attach;
//! symmetric windows written through peers' mappings; bad input is a
//! typed error on every rank and corrupts nothing. The same across
//! processes: `multiprocess_memory.rs`.

use hccl_adapter::{peer_access_stats, CommConfig, DeviceMem, HcclComm, HcclResult};
use hccl_tests::registered::{run_checked, sym_window_roundtrip};
use hccl_tests::{comms_with_env, run_ranks};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);

/// (op, its direct executor, count per block): AllReduce larger than one
/// 256 KiB reduction window.
const DIRECT: [(&str, &str, usize); 4] = [
    ("allreduce", "AllReduceDirectExecutor", 300_001),
    ("allgather", "AllGatherDirectExecutor", 70_001),
    ("alltoall", "AllToAllDirectExecutor", 30_001),
    ("reducescatter", "ReduceScatterDirectExecutor", 30_001),
];

fn direct_on_threads(p: u32, register: bool) {
    for (op, executor, count) in DIRECT {
        let comms = comms_with_env(p, &[("HCCL_RS_EXECUTOR", executor), ("HCCL_BUFFSIZE", "1")]);
        run_ranks(p, LIMIT, move |r| {
            run_checked(&comms[r as usize], op, count, register).unwrap();
        });
    }
}

#[test]
fn direct_executors_read_registered_buffers_through_their_mapping() {
    if !hccl_platform::cross_memory_attach_permitted() {
        return; // the direct executors need cross-memory attach as their fallback
    }
    for p in [2, 4] {
        let before = peer_access_stats();
        direct_on_threads(p, true);
        let after = peer_access_stats();
        assert!(after.mapped_reads > before.mapped_reads, "p={p}: {after:?}");
        assert_eq!(
            after.cma_reads, before.cma_reads,
            "p={p}: no cross-memory read: {after:?}"
        );
        // and the same ops on unregistered buffers read with cross-memory attach
        let before = after;
        direct_on_threads(p, false);
        let after = peer_access_stats();
        assert!(after.cma_reads > before.cma_reads, "p={p}: {after:?}");
        assert_eq!(after.mapped_reads, before.mapped_reads, "p={p}: {after:?}");
    }
}

#[test]
fn symmetric_windows_are_written_through_the_peers_mapping() {
    for p in [2u32, 4] {
        let comms = comms_with_env(p, &[]);
        let all: Vec<u32> = (0..p).collect();
        run_ranks(p, LIMIT, move |r| {
            sym_window_roundtrip(&comms[r as usize], 4096, &all).unwrap();
        });
    }
}

#[test]
fn registration_refuses_private_and_overlapping_memory() {
    let comms = comms_with_env(2, &[]);
    let c = &comms[0];
    let e = c
        .register_mem(&DeviceMem::alloc(4096).unwrap())
        .unwrap_err();
    assert_eq!(e.code(), HcclResult::EPara);
    assert!(
        e.to_string()
            .contains("only shareable memory can be registered"),
        "{e}"
    );
    let m = DeviceMem::alloc_shareable(1 << 16).unwrap();
    let a = c.register_mem(&m.range(0, 8192).unwrap()).unwrap();
    let e = c.register_mem(&m.range(4096, 8192).unwrap()).unwrap_err();
    assert_eq!(e.code(), HcclResult::EPara);
    assert!(e.to_string().contains("overlaps [0, +8192)"), "{e}");
    assert!(c.is_registered(&m.range(100, 100).unwrap()));
    assert!(!c.is_registered(&m.range(8000, 400).unwrap()));
    // registration is per communicator
    assert!(!comms[1].is_registered(&m.range(100, 100).unwrap()));
    let e = comms[1].deregister_mem(&a).unwrap_err();
    assert_eq!(e.code(), HcclResult::EPara);
    c.deregister_mem(&a).unwrap();
    let e = c.deregister_mem(&a).unwrap_err();
    assert_eq!(e.code(), HcclResult::EPara);
    assert!(e.to_string().contains("not a live registration"), "{e}");
    assert!(!c.is_registered(&m.range(100, 100).unwrap()));
    // the memory registers again once free
    c.register_mem(&m.range(4096, 8192).unwrap()).unwrap();
    // exchange_mem refuses bad peer lists before sending anything
    let reg = c.register_mem(&m.range(20_000, 64).unwrap()).unwrap();
    for (peers, needle) in [
        (vec![0u32], "itself"),
        (vec![5], "out of range"),
        (vec![1, 1], "listed twice"),
    ] {
        let e = c.exchange_mem(&reg, &peers).unwrap_err();
        assert_eq!(e.code(), HcclResult::EPara, "{peers:?}");
        assert!(e.to_string().contains(needle), "{e}");
    }
}

#[test]
fn exchange_mem_maps_the_peers_registrations() {
    let comms = comms_with_env(2, &[]);
    run_ranks(2, LIMIT, move |r| {
        let c = &comms[r as usize];
        let m = DeviceMem::alloc_shareable(4096).unwrap();
        m.copy_from_host(&[r * 11]).unwrap();
        let reg = c.register_mem(&m).unwrap();
        c.exchange_mem(&reg, &[1 - r]).unwrap();
        let peers = c.exchanged_peers(&reg);
        assert_eq!(peers.len(), 1);
        assert_eq!(peers[0].0, 1 - r);
        // ranks are threads: the peer's registration is its very memory
        assert_eq!(peers[0].1.len(), 4096);
        assert_eq!(peers[0].1.to_vec::<u32>(1).unwrap(), vec![(1 - r) * 11]);
    });
}

/// Ranks 0 and 1 register windows of 4096 bytes, rank 2 of 8192: every
/// rank fails naming the sizes; then a private buffer on one rank: that
/// rank says why, the others name it; then a good window works.
#[test]
fn window_size_mismatch_and_private_windows_fail_on_every_rank() {
    let comms = comms_with_env(3, &[]);
    run_ranks(3, LIMIT, move |r| {
        let c = &comms[r as usize];
        let size = if r == 2 { 8192 } else { 4096 };
        let e = c
            .sym_win_register(&DeviceMem::alloc_shareable(size).unwrap())
            .unwrap_err();
        assert_eq!(e.code(), HcclResult::EPara, "rank {r}: {e}");
        assert!(
            e.to_string()
                .contains("rank 0: 4096 bytes, rank 1: 4096 bytes, rank 2: 8192 bytes"),
            "rank {r}: {e}"
        );
        let mem = if r == 1 {
            DeviceMem::alloc(4096).unwrap()
        } else {
            DeviceMem::alloc_shareable(4096).unwrap()
        };
        let e = c.sym_win_register(&mem).unwrap_err();
        assert_eq!(e.code(), HcclResult::EPara, "rank {r}: {e}");
        let needle = if r == 1 {
            "must be shareable memory"
        } else {
            "rank(s) [1] could not register"
        };
        assert!(e.to_string().contains(needle), "rank {r}: {e}");
        assert!(
            !c.is_registered(&mem),
            "rank {r}: a failed window left a registration"
        );
        // nothing corrupted: a good window and a collective work
        sym_window_roundtrip(c, 4096, &[0, 1, 2]).unwrap();
        run_checked(c, "allreduce", 1000, true).unwrap();
    });
}

#[test]
fn a_window_peer_on_another_host_is_not_supported_naming_it() {
    let config = CommConfig::from_source(&[("HCCL_EXEC_TIMEOUT", "20")][..]).unwrap();
    let comms = std::sync::Arc::new(HcclComm::init_all_on_hosts(vec![0, 0, 1, 1], config).unwrap());
    run_ranks(4, LIMIT, move |r| {
        let c = &comms[r as usize];
        let host: Vec<u32> = if r < 2 { vec![0, 1] } else { vec![2, 3] };
        sym_window_roundtrip(c, 4096, &host).unwrap();
        let m = DeviceMem::alloc_shareable(4096).unwrap();
        let w = c.sym_win_register(&m).unwrap();
        let other = if r < 2 { 2 } else { 0 };
        let e = w.peer_ptr(0, other).unwrap_err();
        assert_eq!(e.code(), HcclResult::ENotSupport, "{e}");
        let want = format!(
            "rank {other} is on host declared host {}, this rank ({r}) on host declared host {}",
            other / 2,
            r / 2
        );
        assert!(e.to_string().contains(&want), "{e}");
        let e = w.peer_ptr(4096, r ^ 1).unwrap_err();
        assert_eq!(e.code(), HcclResult::EPara, "{e}");
        let e = w.peer_mem(9).unwrap_err();
        assert_eq!(e.code(), HcclResult::EPara, "{e}");
        c.sym_win_deregister(&w).unwrap();
        let e = w.peer_mem(r).unwrap_err();
        assert!(e.to_string().contains("deregistered"), "{e}");
        let e = c.sym_win_deregister(&w).unwrap_err();
        assert_eq!(e.code(), HcclResult::EPara, "{e}");
    });
}
