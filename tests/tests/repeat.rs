//! The repeat path (issue 30), ranks as threads: every collective
//! repeated on the same buffers with new data, rooted ops' senders 300
//! repeats ahead of sleeping receivers, interleaved ops
//! (`hccl_tests::repeat`, p = 2..9), and what must send a call down the
//! full path or stay observable: other buffers, registration, freed
//! memory, abort, the flight recorder, a timeline, capture and groups.
//! The process version is in `root_ahead.rs`
//! (`repeat_through_processes_p2_p5_p9`).

use hccl_adapter::{
    group_end, group_start, CaptureMode, DataType, DeviceMem, HcclComm, HcclResult, ReduceOp,
    Stream,
};
use hccl_tests::{comms_with_env, run_ranks};
use std::sync::Arc;
use std::time::Duration;

const T: DataType = DataType::Int32;

fn comms(p: u32) -> Arc<Vec<HcclComm>> {
    comms_with_env(p, &[])
}

/// One stream per rank, kept across rounds: a repeat is for the stream
/// its op first ran on.
fn streams(comms: &[HcclComm]) -> Arc<Vec<Stream>> {
    Arc::new(comms.iter().map(HcclComm::create_stream).collect())
}

#[test]
fn every_op_repeated_at_every_size_class_p2_to_9() {
    for p in 2u32..=9 {
        for root in [p - 1, 0] {
            let comms = comms(p);
            run_ranks(p, Duration::from_secs(150), move |r| {
                hccl_tests::repeat::run(&comms[r as usize], root, Duration::from_millis(30))
                    .unwrap_or_else(|e| panic!("p={p} root={root}: {e}"));
            });
            if p > 3 {
                break;
            }
        }
    }
}

/// Per rank of 2, a (send, receive) pair of `bytes` each: private
/// memory, or shareable memory (which peers may map: registration,
/// capture).
fn pairs(bytes: usize, shareable: bool) -> Arc<Vec<(DeviceMem, DeviceMem)>> {
    let alloc = |n| {
        if shareable {
            DeviceMem::alloc_shareable(n).unwrap()
        } else {
            DeviceMem::alloc(n).unwrap()
        }
    };
    Arc::new((0..2).map(|_| (alloc(bytes), alloc(bytes))).collect())
}

/// AllReduce of `n` int32 on every rank of `comms`, rank r's input
/// `base + r`, the output checked; `bufs(r)` gives rank r's (send, recv).
fn all_reduce_round(
    (comms, streams): (&Arc<Vec<HcclComm>>, &Arc<Vec<Stream>>),
    n: usize,
    base: i32,
    bufs: impl Fn(u32) -> (DeviceMem, DeviceMem) + Send + Sync + 'static,
) {
    let (comms, streams) = (comms.clone(), streams.clone());
    let p = comms.len() as i32;
    run_ranks(p as u32, Duration::from_secs(30), move |r| {
        let (c, s) = (&comms[r as usize], &streams[r as usize]);
        let (send, recv) = bufs(r);
        send.copy_from_host(&vec![base + r as i32; n]).unwrap();
        c.all_reduce_raw(&send, &recv, n as u64, T, ReduceOp::Sum, s)
            .unwrap();
        s.synchronize().unwrap();
        let want = (0..p).map(|q| base + q).sum::<i32>();
        assert_eq!(recv.to_vec::<i32>(n).unwrap(), vec![want; n], "rank {r}");
    });
}

#[test]
fn a_repeat_follows_its_buffers() {
    // two pairs of buffers per rank, alternating, then a sub-range of
    // the first pair: each call's own memory, never the last call's
    let comms = comms(2);
    let streams = streams(&comms);
    let a: Arc<Vec<_>> = pairs(64, false);
    let b: Arc<Vec<_>> = pairs(64, false);
    for round in 0..6 {
        let which = if round % 2 == 0 { a.clone() } else { b.clone() };
        all_reduce_round((&comms, &streams), 2, round * 10, move |r| {
            which[r as usize].clone()
        });
    }
    for (k, round) in (100..104).enumerate() {
        let a = a.clone();
        all_reduce_round((&comms, &streams), 2, round, move |r| {
            let (s, v) = &a[r as usize];
            let at = 8 * (k % 2);
            (s.range(at, 8).unwrap(), v.range(at, 8).unwrap())
        });
    }
    for r in 0..2 {
        // the second half of the output, written only by sub-range calls
        let (_, v) = &a[r];
        assert_eq!(v.to_vec::<i32>(4).unwrap()[2..], [2 * 103 + 1, 2 * 103 + 1]);
    }
}

#[test]
fn registering_memory_between_repeats_changes_nothing_in_the_results() {
    // registration decides graph or op-base mode: a repeat made before it
    // must not run after it (and the other way round)
    let comms = comms(2);
    let streams = streams(&comms);
    let bufs: Arc<Vec<_>> = pairs(64, true);
    let each = |bufs: &Arc<Vec<(DeviceMem, DeviceMem)>>| {
        let bufs = bufs.clone();
        move |r: u32| bufs[r as usize].clone()
    };
    for round in 0..3 {
        all_reduce_round((&comms, &streams), 4, round, each(&bufs));
    }
    let regs: Vec<_> = (0..2)
        .map(|r| {
            let (s, v) = &bufs[r];
            let c = &comms[r];
            (c.register_mem(s).unwrap(), c.register_mem(v).unwrap())
        })
        .collect();
    for round in 10..13 {
        all_reduce_round((&comms, &streams), 4, round, each(&bufs));
    }
    for (r, (rs, rv)) in regs.iter().enumerate() {
        comms[r].deregister_mem(rs).unwrap();
        comms[r].deregister_mem(rv).unwrap();
    }
    for round in 20..23 {
        all_reduce_round((&comms, &streams), 4, round, each(&bufs));
    }
}

#[test]
fn a_repeated_op_does_not_keep_its_freed_buffer() {
    // shared-memory buffers: their segment is unlinked when the last
    // handle goes, which a strong reference in the repeat cache would stop
    let comms = comms(2);
    let streams = streams(&comms);
    let names: Vec<String> = (0..2)
        .map(|r| format!("hccl-rs-test-repeat-{}-{r}", std::process::id()))
        .collect();
    let bufs: Arc<Vec<_>> = Arc::new(
        names
            .iter()
            .map(|n| DeviceMem::create_shared(n, 64).unwrap())
            .collect::<Vec<_>>(),
    );
    for round in 0..3 {
        let bufs = bufs.clone();
        all_reduce_round((&comms, &streams), 2, round, move |r| {
            let m = &bufs[r as usize];
            (m.range(0, 8).unwrap(), m.range(32, 8).unwrap())
        });
    }
    for n in &names {
        assert!(std::path::Path::new(&format!("/dev/shm/{n}")).exists());
    }
    drop(bufs);
    for n in &names {
        assert!(
            !std::path::Path::new(&format!("/dev/shm/{n}")).exists(),
            "/dev/shm/{n} outlived its buffer: something still holds it"
        );
    }
    // the communicators still work, on new buffers
    all_reduce_round((&comms, &streams), 2, 7, |_| {
        (DeviceMem::alloc(8).unwrap(), DeviceMem::alloc(8).unwrap())
    });
}

#[test]
fn an_aborted_communicator_refuses_a_repeat_as_any_op() {
    let comms = comms(2);
    let streams = streams(&comms);
    let bufs: Arc<Vec<_>> = pairs(8, false);
    for round in 0..3 {
        let bufs = bufs.clone();
        all_reduce_round((&comms, &streams), 2, round, move |r| {
            bufs[r as usize].clone()
        });
    }
    let repeated = comms[0].communicator().repeated_ops();
    comms[0].abort("the test aborts it");
    // the same call on the same stream: a repeat, refused as the full
    // path refuses any op
    let s = &streams[0];
    let before = s.progress().enqueued;
    let (send, recv) = &bufs[0];
    let e = comms[0]
        .all_reduce_raw(send, recv, 2, T, ReduceOp::Sum, s)
        .unwrap_err();
    assert_eq!(e.code(), HcclResult::ESuspending, "{e}");
    assert!(
        e.to_string()
            .contains("the communicator was aborted: the test aborts it"),
        "{e}"
    );
    assert_eq!(
        s.progress().enqueued,
        before,
        "nothing may be enqueued: {e}"
    );
    assert_eq!(comms[0].communicator().repeated_ops(), repeated);
}

#[test]
fn the_flight_recorder_and_a_timeline_see_every_repeat() {
    let comms = comms(2);
    let streams = streams(&comms);
    let bufs: Arc<Vec<_>> = pairs(8, false);
    let issued = |c: &HcclComm| {
        c.communicator()
            .flight_recorder()
            .expect("the flight recorder is on by default")
            .snapshot("test")
            .ops_issued
    };
    let before = issued(&comms[0]);
    let repeated = comms[0].communicator().repeated_ops();
    for round in 0..5 {
        let bufs = bufs.clone();
        all_reduce_round((&comms, &streams), 2, round, move |r| {
            bufs[r as usize].clone()
        });
    }
    assert_eq!(issued(&comms[0]) - before, 5);
    // the first call takes the full path, the others repeat it
    assert_eq!(comms[0].communicator().repeated_ops() - repeated, 4);
    let dump = comms[0]
        .communicator()
        .flight_recorder()
        .unwrap()
        .snapshot("test");
    let last = dump.entries.last().expect("entries");
    assert_eq!((last.op.as_str(), last.count), ("AllReduce", 2), "{last:?}");
    assert_eq!(last.state, "completed", "{last:?}");

    // a timeline started between repeats records the ops after it
    for c in comms.iter() {
        c.device().start_timeline(1 << 12);
    }
    let repeated = comms[0].communicator().repeated_ops();
    for round in 10..13 {
        let bufs = bufs.clone();
        all_reduce_round((&comms, &streams), 2, round, move |r| {
            bufs[r as usize].clone()
        });
    }
    assert_eq!(
        comms[0].communicator().repeated_ops(),
        repeated,
        "a timeline records ops one by one: no repeats while it is on"
    );
    let path = std::env::temp_dir().join(format!("hccl-rs-repeat-{}.json", std::process::id()));
    comms[0].write_timeline(&path).unwrap();
    let json = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    let ops = json.matches("\"name\":\"AllReduce\"").count();
    assert!(
        ops >= 3,
        "3 AllReduce spans expected in the timeline, saw {ops}: {json}"
    );
}

#[test]
fn capture_and_groups_after_repeats_take_the_full_path() {
    let comms = comms(2);
    let bufs: Arc<Vec<_>> = pairs(8, true);
    let comms2 = comms.clone();
    run_ranks(2, Duration::from_secs(30), move |r| {
        let c = &comms2[r as usize];
        let (send, recv) = &bufs[r as usize];
        let s = c.create_stream();
        let run = |base: i32| {
            send.copy_from_host(&[base + r as i32; 2]).unwrap();
            c.all_reduce_raw(send, recv, 2, T, ReduceOp::Sum, &s)
                .unwrap();
            s.synchronize().unwrap();
            assert_eq!(recv.to_vec::<i32>(2).unwrap(), [2 * base + 1; 2]);
        };
        for base in 0..3 {
            run(base);
        }
        // captured, then replayed with new input each time
        s.begin_capture(CaptureMode::Global).unwrap();
        c.all_reduce_raw(send, recv, 2, T, ReduceOp::Sum, &s)
            .unwrap();
        let g = s.end_capture().unwrap();
        for base in [40, 50] {
            send.copy_from_host(&[base + r as i32; 2]).unwrap();
            g.launch(&s).unwrap();
            s.synchronize().unwrap();
            assert_eq!(recv.to_vec::<i32>(2).unwrap(), [2 * base + 1; 2]);
        }
        // in a group: deferred until its end
        send.copy_from_host(&[60 + r as i32; 2]).unwrap();
        recv.copy_from_host(&[-1; 2]).unwrap();
        group_start();
        c.all_reduce_raw(send, recv, 2, T, ReduceOp::Sum, &s)
            .unwrap();
        assert_eq!(s.progress().enqueued, s.progress().completed);
        group_end().unwrap();
        s.synchronize().unwrap();
        assert_eq!(recv.to_vec::<i32>(2).unwrap(), [121; 2]);
        for base in 70..73 {
            run(base);
        }
    });
}

/// Minor page faults of the calling thread so far.
fn minor_faults() -> i64 {
    use nix::sys::resource::{getrusage, UsageWho};
    getrusage(UsageWho::RUSAGE_THREAD)
        .expect("getrusage")
        .minor_page_faults()
}

#[test]
fn repeated_small_ops_take_no_page_faults() {
    // every page an op touches was touched before: the boards, the flight
    // recorder's ring (whose first pass took a fault every 51 ops, 40 in
    // 2,000 ops, until it was touched when made), the streams' queues. The
    // ring holds 8,000 entries here, so the 2,000 measured ops write
    // entries the warm-up did not. The warm-up has each rank in turn run
    // ahead of its sleeping peer up to the launch's back-pressure, so its
    // queues have grown to their largest (a queue that grows moves to
    // fresh pages once: about 40 faults, seen when other tests loaded the
    // machine). A few faults are the machine's: with transparent huge
    // pages, the kernel may split a mostly-zero huge page and give its
    // zero subpages back (7-14 faults per 2,000 ops measured on the boards
    // here), so the bound catches a fault per few dozen ops, not those.
    let comms = comms_with_env(2, &[("HCCL_RS_FR_BUFFER_SIZE", "8000")]);
    let streams = streams(&comms);
    run_ranks(2, Duration::from_secs(60), move |r| {
        let (c, s) = (&comms[r as usize], &streams[r as usize]);
        let send = DeviceMem::alloc(8).unwrap();
        let recv = DeviceMem::alloc(8).unwrap();
        send.copy_from_host(&[r as i32 + 1; 2]).unwrap();
        let ops = |n: usize| {
            for _ in 0..n {
                c.all_reduce_raw(&send, &recv, 2, T, ReduceOp::Sum, s)
                    .unwrap();
                c.broadcast_raw(&recv, 2, T, 0, s).unwrap();
            }
            s.synchronize().unwrap();
        };
        for ahead in 0..2 {
            if r != ahead {
                std::thread::sleep(Duration::from_millis(50));
            }
            ops(300);
        }
        let before = minor_faults();
        ops(1000);
        let faults = minor_faults() - before;
        assert_eq!(recv.to_vec::<i32>(2).unwrap(), [3, 3]);
        assert!(
            faults <= 25,
            "rank {r}: 2,000 repeated 8-byte ops took {faults} page faults"
        );
    });
}
