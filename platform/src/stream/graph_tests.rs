//! Capture and replay (`graph.rs`): what is recorded runs only when the
//! graph is launched, as often as it is launched, with the host's latest
//! data; errors invalidate; misuse is refused by kind.

use super::*;
use crate::aiv::{AivBoards, AivKind, AivLaunch};
use crate::link::{InProcEndpoint, InProcLink, LinkHandle, OpDesc};
use crate::mem::MemKind;
use crate::HcclResult;
use std::sync::atomic::AtomicU32;

fn dev(id: u32, mode: ExecMode) -> Device {
    Device::new(
        id,
        DeviceConfig {
            exec_timeout: Some(Duration::from_secs(20)),
            mode,
            ..Default::default()
        },
    )
}

fn endpoint(rank: u32, d: &Device, mem: &DeviceMem) -> InProcEndpoint {
    InProcEndpoint {
        rank,
        mems: vec![(MemKind::CclOutput, mem.clone())],
        waker: d.waker(),
        board: Some(InProcEndpoint::new_board().unwrap()),
    }
}

fn label(tag: &str) -> Arc<OpLabel> {
    Arc::new(OpLabel {
        tag: tag.into(),
        algorithm: "TestAlgo".into(),
        rank: 0,
    })
}

/// Copies, a reduction and a notify-ordered second lane, captured once and
/// replayed 100 times with the inputs rewritten between launches.
#[test]
fn captured_tasks_run_only_when_launched_and_every_time() {
    for mode in [ExecMode::Inline, ExecMode::Worker] {
        let d = dev(0, mode);
        let main = Stream::new(&d);
        let side = Stream::new(&d);
        let (go, done) = (Notify::new(&d), Notify::new(&d));
        let a = DeviceMem::alloc(16).unwrap();
        let b = DeviceMem::alloc(16).unwrap();
        let sum = DeviceMem::alloc(16).unwrap();
        let copy = DeviceMem::alloc(16).unwrap();
        main.begin_capture(CaptureMode::Global).unwrap();
        assert!(main.is_capturing());
        assert_eq!(main.capture_status(), CaptureStatus::Active);
        main.set_label_to(&label("op1"));
        // sum = a + b on main; the side lane copies sum once main says so;
        // main waits for the side lane before it ends
        main.memcpy_async(&sum, &a).unwrap();
        main.reduce_async(&sum, &b, DataType::Int32, ReduceOp::Sum)
            .unwrap();
        main.notify_record(&go).unwrap();
        side.join_capture(&main).unwrap();
        assert_eq!(side.capture_status(), CaptureStatus::Active);
        side.notify_wait(&go).unwrap();
        side.memcpy_async(&copy, &sum).unwrap();
        side.notify_record(&done).unwrap();
        side.leave_capture();
        assert!(!side.is_capturing());
        main.notify_wait(&done).unwrap();
        main.capture_note(&label("op1"));
        // nothing ran, nothing is queued, nothing is pinned
        assert!(main.query() && side.query());
        assert_eq!(a.tasks_in_flight(), 0);
        let g = main.end_capture().unwrap();
        assert!(!main.is_capturing());
        assert_eq!(main.capture_status(), CaptureStatus::None);
        assert_eq!((g.op_count(), g.task_count(), g.lane_count()), (1, 7, 2));
        assert_eq!(g.ops().next().unwrap().tag, "op1");
        assert_eq!(sum.to_vec::<i32>(4).unwrap(), vec![0; 4]);
        for i in 0..100i32 {
            // the host rewrites the inputs between launches
            a.copy_from_host(&[i, 2 * i, 3 * i, 4 * i]).unwrap();
            b.copy_from_host(&[1, 1, 1, -i]).unwrap();
            g.launch(&main).unwrap();
            main.synchronize().unwrap();
            side.synchronize().unwrap();
            let want = vec![i + 1, 2 * i + 1, 3 * i + 1, 3 * i];
            assert_eq!(sum.to_vec::<i32>(4).unwrap(), want, "launch {i}");
            assert_eq!(copy.to_vec::<i32>(4).unwrap(), want, "launch {i}");
        }
        // launches may be queued behind each other: the reduction
        // accumulates into `acc` once per launch
        let acc = DeviceMem::alloc(4).unwrap();
        let one = DeviceMem::alloc(4).unwrap();
        one.copy_from_host(&[1i32]).unwrap();
        main.begin_capture(CaptureMode::Relaxed).unwrap();
        main.reduce_async(&acc, &one, DataType::Int32, ReduceOp::Sum)
            .unwrap();
        let g2 = main.end_capture().unwrap();
        for _ in 0..5 {
            g2.launch(&main).unwrap();
        }
        // another stream of the device may launch it too
        let other = Stream::new(&d);
        g2.clone().launch(&other).unwrap();
        other.synchronize().unwrap();
        main.synchronize().unwrap();
        assert_eq!(acc.to_vec::<i32>(1).unwrap(), vec![6]);
    }
}

#[test]
fn capture_state_transitions_and_misuse_are_refused_by_kind() {
    let d = dev(0, ExecMode::Inline);
    let s = Stream::new(&d);
    let t = Stream::new(&d);
    assert_eq!(s.capture_status(), CaptureStatus::None);
    let e = s.end_capture().unwrap_err();
    assert_eq!(e.code(), HcclResult::EPara);
    assert!(e.to_string().contains("not capturing"), "{e}");
    let e = t.join_capture(&s).unwrap_err();
    assert!(e.to_string().contains("no capture to join"), "{e}");
    s.begin_capture(CaptureMode::ThreadLocal).unwrap();
    assert_eq!(s.capture_mode(), Some(CaptureMode::ThreadLocal));
    let e = s.begin_capture(CaptureMode::Global).unwrap_err();
    assert_eq!(e.code(), HcclResult::EPara);
    assert!(e.to_string().contains("already capturing"), "{e}");
    // a joined stream can neither begin its own capture nor end this one
    t.join_capture(&s).unwrap();
    t.join_capture(&s).unwrap(); // again: a no-op
    assert_eq!(
        t.begin_capture(CaptureMode::Global).unwrap_err().code(),
        HcclResult::EPara
    );
    let e = t.end_capture().unwrap_err();
    assert!(e.to_string().contains("only joined"), "{e}");
    // another device's stream cannot join
    let d2 = dev(1, ExecMode::Inline);
    let e = Stream::new(&d2).join_capture(&s).unwrap_err();
    assert!(e.to_string().contains("different devices"), "{e}");
    // none of that invalidated the capture; ending it takes the joined
    // stream out too
    assert_eq!(s.capture_status(), CaptureStatus::Active);
    let g = s.end_capture().unwrap();
    assert_eq!((g.task_count(), g.op_count(), g.lane_count()), (0, 0, 2));
    assert!(!t.is_capturing());
    assert_eq!(t.capture_status(), CaptureStatus::None);
    // an empty graph launches (and does nothing)
    g.launch(&s).unwrap();
    s.synchronize().unwrap();
    // a new capture may begin once the last ended
    s.begin_capture(CaptureMode::Global).unwrap();
    s.end_capture().unwrap();
}

#[test]
fn an_error_while_capturing_invalidates_the_capture() {
    let d = dev(0, ExecMode::Inline);
    let s = Stream::new(&d);
    let a = DeviceMem::alloc(16).unwrap();
    let b = DeviceMem::alloc(8).unwrap();
    // a rejected enqueue
    s.begin_capture(CaptureMode::Global).unwrap();
    s.memcpy_async(&a, &a).unwrap();
    let e = s.memcpy_async(&a, &b).unwrap_err();
    assert_eq!(e.code(), HcclResult::EPara);
    assert_eq!(s.capture_status(), CaptureStatus::Invalidated);
    assert!(s.is_capturing());
    // later enqueues say why
    let e = s.memcpy_async(&b, &b).unwrap_err();
    assert!(e.to_string().contains("was invalidated"), "{e}");
    let e = s.end_capture().unwrap_err();
    assert_eq!(e.code(), HcclResult::EPara);
    assert!(
        e.to_string().contains("invalidated") && e.to_string().contains("memcpy_async"),
        "{e}"
    );
    // the capture is over; the stream works as before
    assert_eq!(s.capture_status(), CaptureStatus::None);
    s.memcpy_async(&a, &a).unwrap();
    s.synchronize().unwrap();

    // a synchronize while capturing
    s.begin_capture(CaptureMode::Global).unwrap();
    let e = s.synchronize().unwrap_err();
    assert_eq!(e.code(), HcclResult::ENotSupport);
    assert!(e.to_string().contains("is capturing"), "{e}");
    assert_eq!(s.capture_status(), CaptureStatus::Invalidated);
    assert_eq!(s.end_capture().unwrap_err().code(), HcclResult::ENotSupport);

    // a run-once host callback
    s.begin_capture(CaptureMode::Global).unwrap();
    let e = s.host_callback(|| Ok(())).unwrap_err();
    assert_eq!(e.code(), HcclResult::ENotSupport);
    assert!(e.to_string().contains("host_fn"), "{e}");
    assert!(s.end_capture().is_err());

    // an op that fails half-way rolls back
    s.begin_capture(CaptureMode::Global).unwrap();
    let mark = s.mark();
    s.memcpy_async(&a, &a).unwrap();
    s.rollback(mark, &HcclError::remote("peer 3 refused the op"));
    let e = s.end_capture().unwrap_err();
    assert!(e.to_string().contains("peer 3 refused"), "{e}");

    // a kernel that cannot copy itself
    #[derive(Debug)]
    struct Once;
    impl Kernel for Once {
        fn poll(&mut self) -> Poll<Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn describe(&self) -> String {
            "the once kernel".into()
        }
    }
    s.begin_capture(CaptureMode::Global).unwrap();
    let e = s.enqueue(TaskKind::Kernel(Box::new(Once))).unwrap_err();
    assert_eq!(e.code(), HcclResult::ENotSupport);
    assert!(e.to_string().contains("the once kernel"), "{e}");
    assert!(s.end_capture().is_err());
    assert!(s.query(), "nothing was queued by the failed captures");
}

#[test]
fn host_functions_and_kernels_replay_every_launch() {
    #[derive(Debug)]
    struct Count(Arc<AtomicU32>, u32);
    impl Kernel for Count {
        fn poll(&mut self) -> Poll<Result<()>> {
            // a fresh copy per replay: polled from its own start
            self.1 += 1;
            if self.1 < 3 {
                return Poll::Pending;
            }
            self.0.fetch_add(1, Ordering::Relaxed);
            Poll::Ready(Ok(()))
        }
        fn describe(&self) -> String {
            "counting kernel".into()
        }
        fn replay(&self) -> Option<Box<dyn Kernel>> {
            Some(Box::new(Count(self.0.clone(), 0)))
        }
    }
    let d = dev(0, ExecMode::Inline);
    let s = Stream::new(&d);
    let calls = Arc::new(AtomicU32::new(0));
    let kernels = Arc::new(AtomicU32::new(0));
    s.begin_capture(CaptureMode::Global).unwrap();
    let c = calls.clone();
    s.host_fn(move || {
        c.fetch_add(1, Ordering::Relaxed);
        Ok(())
    })
    .unwrap();
    s.enqueue(TaskKind::Kernel(Box::new(Count(kernels.clone(), 0))))
        .unwrap();
    let g = s.end_capture().unwrap();
    assert_eq!(calls.load(Ordering::Relaxed), 0);
    for _ in 0..10 {
        g.launch(&s).unwrap();
    }
    s.synchronize().unwrap();
    assert_eq!(calls.load(Ordering::Relaxed), 10);
    assert_eq!(kernels.load(Ordering::Relaxed), 10);
    // a replayed host function's error fails the stream like any task
    s.begin_capture(CaptureMode::Global).unwrap();
    s.host_fn(|| Err(HcclError::internal("replayed callback says no")))
        .unwrap();
    let g = s.end_capture().unwrap();
    g.launch(&s).unwrap();
    let e = s.synchronize().unwrap_err();
    assert!(e.to_string().contains("replayed callback says no"), "{e}");
}

#[test]
fn launch_is_refused_on_another_device_or_into_a_capture() {
    let d0 = dev(0, ExecMode::Inline);
    let d1 = dev(1, ExecMode::Inline);
    let s0 = Stream::new(&d0);
    let m = DeviceMem::alloc(8).unwrap();
    s0.begin_capture(CaptureMode::Global).unwrap();
    s0.memcpy_async(&m, &m).unwrap();
    let g = s0.end_capture().unwrap();
    let e = g.launch(&Stream::new(&d1)).unwrap_err();
    assert_eq!(e.code(), HcclResult::EPara);
    assert!(e.to_string().contains("captured on device 0"), "{e}");
    let other = Stream::new(&d0);
    other.begin_capture(CaptureMode::Global).unwrap();
    let e = g.launch(&other).unwrap_err();
    assert_eq!(e.code(), HcclResult::ENotSupport);
    assert_eq!(other.capture_status(), CaptureStatus::Invalidated);
    assert!(other.end_capture().is_err());
    assert!(
        s0.query() && other.query(),
        "a refused launch queues nothing"
    );
}

#[test]
fn a_capture_ends_on_its_thread_unless_relaxed() {
    let d = dev(0, ExecMode::Inline);
    for (mode, ok) in [
        (CaptureMode::Global, false),
        (CaptureMode::ThreadLocal, false),
        (CaptureMode::Relaxed, true),
    ] {
        let s = Stream::new(&d);
        s.begin_capture(mode).unwrap();
        let s2 = s.clone();
        let r = std::thread::spawn(move || s2.end_capture().map(|_| ()))
            .join()
            .unwrap();
        assert_eq!(r.is_ok(), ok, "{mode:?}: {r:?}");
        if let Err(e) = r {
            assert_eq!(e.code(), HcclResult::EPara);
            assert!(e.to_string().contains("another thread"), "{e}");
            // still capturing: its own thread ends it
            assert_eq!(s.capture_status(), CaptureStatus::Active);
            s.end_capture().unwrap();
        }
    }
}

/// The graph keeps its buffers and links alive, pins nothing while idle
/// and pins what its queued tasks use while a launch is queued.
#[test]
fn a_graph_holds_its_memory_without_pinning_it() {
    let d = dev(0, ExecMode::Inline);
    let s = Stream::new(&d);
    let src = DeviceMem::alloc(8).unwrap();
    let dst = DeviceMem::alloc(8).unwrap();
    src.copy_from_host(&[5u64]).unwrap();
    s.begin_capture(CaptureMode::Global).unwrap();
    s.memcpy_async(&dst, &src).unwrap();
    let g = s.end_capture().unwrap();
    assert_eq!(src.tasks_in_flight(), 0);
    g.launch(&s).unwrap();
    assert_eq!(src.tasks_in_flight(), 1, "a queued launch pins");
    assert!(src.copy_from_host(&[6u64]).is_err());
    s.synchronize().unwrap();
    assert_eq!(src.tasks_in_flight(), 0);
    let probe = dst.clone();
    drop((src, dst));
    // the graph still holds both buffers
    let g2 = g.clone();
    drop(g);
    probe.fill_bytes(0).unwrap();
    g2.launch(&s).unwrap();
    s.synchronize().unwrap();
    assert_eq!(probe.to_vec::<u64>(1).unwrap(), vec![5]);
}

/// Link verbs between two ranks (threads), each side's captured once and
/// replayed 100 times: every replay starts fresh link state and moves the
/// latest data.
#[test]
fn captured_link_verbs_replay_between_ranks() {
    for mode in [ExecMode::Inline, ExecMode::Worker] {
        let d0 = dev(0, mode);
        let d1 = dev(1, mode);
        let out0 = DeviceMem::alloc(64).unwrap();
        let out1 = DeviceMem::alloc(64).unwrap();
        let (l0, l1) = InProcLink::pair(&endpoint(0, &d0, &out0), &endpoint(1, &d1, &out1));
        let (l0, l1) = (LinkHandle::new(Arc::new(l0)), LinkHandle::new(Arc::new(l1)));
        let src1 = DeviceMem::alloc(16).unwrap();
        let dst0 = DeviceMem::alloc(16).unwrap();
        let barrier = Arc::new(std::sync::Barrier::new(2));
        let b1 = barrier.clone();
        let t = std::thread::spawn(move || -> Result<()> {
            let s1 = Stream::new(&d1);
            s1.begin_capture(CaptureMode::Global)?;
            // the consistency handshake: descriptor verbs, shared by replays
            l1.exchange_desc(OpDesc::default(), &s1)?;
            l1.tx_after_ack(MemKind::CclOutput, 32, &src1, &s1)?;
            l1.tx_wait_done(&s1)?;
            let g = s1.end_capture()?;
            for i in 0..100u32 {
                src1.copy_from_host(&[i, i + 1, i + 2, i + 3])?;
                g.launch(&s1)?;
                s1.synchronize()?;
                b1.wait();
            }
            Ok(())
        });
        let s0 = Stream::new(&d0);
        s0.begin_capture(CaptureMode::Global).unwrap();
        l0.exchange_desc(OpDesc::default(), &s0).unwrap();
        l0.tx_ack(&s0).unwrap();
        l0.rx_wait_done(&s0).unwrap();
        s0.memcpy_async(&dst0, &out0.range(32, 16).unwrap())
            .unwrap();
        let g = s0.end_capture().unwrap();
        for i in 0..100u32 {
            g.launch(&s0).unwrap();
            s0.synchronize().unwrap();
            assert_eq!(dst0.to_vec::<u32>(4).unwrap(), vec![i, i + 1, i + 2, i + 3]);
            barrier.wait();
        }
        t.join().unwrap().unwrap();
    }
}

/// An AIV AllReduce kernel launched on two capturing ranks is recorded,
/// and each replay launches it again (taking the next op on the boards).
#[test]
fn captured_aiv_kernels_relaunch_every_replay() {
    let d0 = dev(0, ExecMode::Inline);
    let d1 = dev(1, ExecMode::Inline);
    let m0 = DeviceMem::alloc(64).unwrap();
    let m1 = DeviceMem::alloc(64).unwrap();
    let (l0, l1) = InProcLink::pair(&endpoint(0, &d0, &m0), &endpoint(1, &d1, &m1));
    let links = [LinkHandle::new(Arc::new(l0)), LinkHandle::new(Arc::new(l1))];
    let rank = |r: usize, d: Device, link: LinkHandle| {
        std::thread::spawn(move || -> Result<()> {
            let boards = AivBoards::new(&[link])?;
            let s = Stream::new(&d);
            let input = DeviceMem::alloc(16)?;
            let output = DeviceMem::alloc(16)?;
            let kind = AivKind::AllReduce {
                dtype: DataType::Int32,
                op: ReduceOp::Sum,
            };
            s.begin_capture(CaptureMode::Global)?;
            let k = AivLaunch::new(kind, &boards, (&input, &output), 16, &OpDesc::default())?;
            s.aiv_launch(k)?;
            let g = s.end_capture()?;
            assert_eq!(g.task_count(), 1);
            assert_eq!(output.to_vec::<i32>(4)?, vec![0; 4], "nothing ran");
            for i in 0..100i32 {
                let mine = (r as i32 + 1) * i;
                input.copy_from_host(&[mine, 1, -mine, 7])?;
                g.launch(&s)?;
                s.synchronize()?;
                // 1·i + 2·i
                assert_eq!(
                    output.to_vec::<i32>(4)?,
                    vec![3 * i, 2, -3 * i, 14],
                    "replay {i}"
                );
            }
            Ok(())
        })
    };
    let [a, b] = links;
    let t0 = rank(0, d0, a);
    let t1 = rank(1, d1, b);
    t0.join().unwrap().unwrap();
    t1.join().unwrap().unwrap();
}
