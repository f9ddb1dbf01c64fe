//! Shrink, agreement and grow for ranks that are threads of one process
//! (issue 32): the survivors of a rank whose communicator is gone agree on
//! it, shrink without it and go on; the shrunk communicator grows back
//! with a new thread; registered memory comes along; survivors told
//! different exclusions get an error saying so. Every run is bounded by a
//! watchdog: a hang fails in seconds.

use hccl_adapter::{DataType, DeviceMem, HcclComm, ReduceOp, RootInfo};
use std::sync::mpsc;
use std::time::Duration;

/// Runs `f` on a thread and fails the test if it takes over `limit`.
fn bounded<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit)
        .unwrap_or_else(|_| panic!("no result within {limit:?}: a hang"))
}

/// One AllReduce of every rank's `rank + 1` on `c`, checked.
fn check_allreduce(c: &HcclComm) -> hccl_adapter::Result<()> {
    let (r, p) = (c.rank(), c.size());
    let s = c.create_stream();
    let n = 3000;
    let send = DeviceMem::alloc(n * 4)?;
    let recv = DeviceMem::alloc(n * 4)?;
    send.copy_from_host(&vec![(r + 1) as f32; n])?;
    c.all_reduce_raw(&send, &recv, n as u64, DataType::Fp32, ReduceOp::Sum, &s)?;
    s.synchronize()?;
    let want = (p * (p + 1) / 2) as f32;
    let got = recv.to_vec::<f32>(n)?;
    assert!(
        got.iter().all(|&v| v == want),
        "rank {r} of {p}: {} instead of {want}",
        got[0]
    );
    Ok(())
}

/// Rank 2 of 4 is gone (its communicator destroyed); the others' next op
/// fails naming nothing in particular, they agree that rank 2 is lost
/// without being told, shrink to 3 ranks (renumbered in order, a
/// registered buffer still registered), run a checked AllReduce, then grow
/// back to 4 with a new thread (rank 0 makes the id) and run another.
#[test]
fn threads_agree_shrink_and_grow_back() {
    bounded(Duration::from_secs(60), || {
        let mut comms = HcclComm::init_all(4).unwrap();
        drop(comms.remove(2));
        let (id_tx, id_rx) = mpsc::channel::<RootInfo>();
        let newcomer = std::thread::spawn(move || {
            let id = id_rx.recv().unwrap();
            let c = HcclComm::join_grown(4, &id, 3).unwrap();
            assert_eq!((c.rank(), c.size()), (3, 4));
            check_allreduce(&c).unwrap();
        });
        let survivors: Vec<_> = comms
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                let old = if i < 2 { i as u32 } else { 3 };
                let id_tx = id_tx.clone();
                std::thread::spawn(move || {
                    assert_eq!(c.rank(), old);
                    let mem = DeviceMem::alloc_shareable(4096).unwrap();
                    let reg = c.register_mem(&mem).unwrap();
                    let lost = c.agree_lost(Duration::from_secs(5)).unwrap();
                    assert_eq!(lost, vec![2], "rank {old}");
                    let n = c.shrink_agreed().unwrap();
                    let want_rank = if old == 3 { 2 } else { old };
                    assert_eq!((n.rank(), n.size()), (want_rank, 3), "rank {old}");
                    assert!(
                        n.is_registered(&mem),
                        "rank {old}: registration not carried"
                    );
                    n.deregister_mem(&reg).unwrap();
                    check_allreduce(&n).unwrap();
                    let id = if n.rank() == 0 {
                        let id = n.grow_id().unwrap();
                        id_tx.send(id.clone()).unwrap();
                        Some(id)
                    } else {
                        None
                    };
                    let g = n.grow(4, id.as_ref()).unwrap();
                    assert_eq!((g.rank(), g.size()), (n.rank(), 4), "rank {old}");
                    check_allreduce(&g).unwrap();
                })
            })
            .collect();
        for t in survivors {
            t.join().unwrap();
        }
        newcomer.join().unwrap();
    });
}

/// Told exclusions: rank 1 of 3 is excluded by both others, who shrink to
/// 2 and run a checked AllReduce; a grow id is single-use and an id
/// unknown to the process is refused.
#[test]
fn threads_shrink_without_told_ranks() {
    bounded(Duration::from_secs(60), || {
        let mut comms = HcclComm::init_all(3).unwrap();
        drop(comms.remove(1));
        let ts: Vec<_> = comms
            .into_iter()
            .map(|c| {
                std::thread::spawn(move || {
                    let n = c.shrink(&[1]).unwrap();
                    assert_eq!(n.size(), 2);
                    assert_eq!(n.rank(), if c.rank() == 0 { 0 } else { 1 });
                    check_allreduce(&n).unwrap();
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
        // an id that no communicator of this process made
        let mut bogus = RootInfo([0u8; hccl_adapter::HCCL_ROOT_INFO_BYTES]);
        bogus.0[..16].copy_from_slice(b"hccl-rs:inproc:g");
        bogus.0[16] = 0xee;
        bogus.0[17] = 0xee;
        let err = HcclComm::join_grown(3, &bogus, 2).unwrap_err();
        assert!(err.to_string().contains("unknown to this process"), "{err}");
    });
}

/// Survivors told different exclusions do not build apart: the second to
/// arrive gets `HCCL_E_PARA` naming both lists.
#[test]
fn threads_told_different_exclusions_are_refused() {
    bounded(Duration::from_secs(60), || {
        let comms = HcclComm::init_all(4).unwrap();
        let first = comms[0].shrink(&[3]).unwrap();
        assert_eq!(first.size(), 3);
        let err = comms[1].shrink(&[2]).unwrap_err();
        assert_eq!(err.code(), hccl_adapter::HcclResult::EPara, "{err}");
        let msg = err.to_string();
        assert!(
            msg.contains("disagree") && msg.contains("[0, 1, 2]") && msg.contains("[0, 1, 3]"),
            "{msg}"
        );
        // the excluded rank itself may not call
        let err = comms[3].shrink(&[3]).unwrap_err();
        assert!(err.to_string().contains("exclude list"), "{err}");
    });
}

/// Issue 32's op-level recovery, threads as ranks: a mismatch (rank 1
/// passes another count) fails the op on every rank; every rank calls
/// `recover` and the same handle runs a checked AllReduce. Then a hung
/// rank (rank 2 enters the op 800 ms late, the others' exec timeout is
/// 300 ms): the others time out, rank 2's op completes or fails when it
/// comes (the others left their parts), all recover and go on. A stream of the old device is refused by name.
#[test]
fn threads_recover_after_a_mismatch_and_a_timeout() {
    bounded(Duration::from_secs(60), || {
        let comms = HcclComm::init_all(3).unwrap();
        let ts: Vec<_> = comms
            .into_iter()
            .map(|c| {
                std::thread::spawn(move || {
                    let r = c.rank();
                    let s = c.create_stream();
                    let n = if r == 1 { 1001 } else { 1000 };
                    let send = DeviceMem::alloc(4004).unwrap();
                    let recv = DeviceMem::alloc(4004).unwrap();
                    let err = c
                        .all_reduce_raw(&send, &recv, n, DataType::Fp32, ReduceOp::Sum, &s)
                        .and_then(|_| s.synchronize())
                        .unwrap_err();
                    eprintln!("rank {r}: mismatch: {err}");
                    c.recover().unwrap();
                    assert_eq!(c.recoveries(), 1);
                    check_allreduce(&c).unwrap();
                    // the old stream belongs to the old device
                    let old = c
                        .all_reduce_raw(&send, &recv, 1000, DataType::Fp32, ReduceOp::Sum, &s)
                        .unwrap_err();
                    assert!(
                        old.to_string().contains("stream belongs to device"),
                        "{old}"
                    );
                    // a hung rank: the others time out
                    c.set_exec_timeout(Some(Duration::from_millis(300)));
                    if r == 2 {
                        std::thread::sleep(Duration::from_millis(800));
                    }
                    let s = c.create_stream();
                    let res = c
                        .all_reduce_raw(&send, &recv, 1000, DataType::Fp32, ReduceOp::Sum, &s)
                        .and_then(|_| s.synchronize());
                    // the late rank may find its op complete (the others
                    // left their parts before giving up) or failed; the
                    // others time out
                    if r != 2 {
                        let err = res.unwrap_err();
                        assert_eq!(err.code(), hccl_adapter::HcclResult::ETimeout, "{err}");
                    }
                    c.recover().unwrap();
                    assert_eq!(c.recoveries(), 2);
                    check_allreduce(&c).unwrap();
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
    });
}
