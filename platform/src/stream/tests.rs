use super::*;
use crate::link::{InProcEndpoint, InProcLink, LinkHandle};
use crate::mem::MemKind;
use crate::HcclResult;

fn dev(mode: ExecMode, timeout_ms: Option<u64>) -> Device {
    Device::new(
        0,
        DeviceConfig {
            exec_timeout: timeout_ms.map(Duration::from_millis),
            mode,
            ..Default::default()
        },
    )
}

#[test]
fn tasks_run_in_order_on_synchronize() {
    for mode in [ExecMode::Inline, ExecMode::Worker] {
        let d = dev(mode, None);
        let s = Stream::new(&d);
        let a = DeviceMem::alloc(16).unwrap();
        let b = DeviceMem::alloc(16).unwrap();
        a.copy_from_host(&[1i32, 2, 3, 4]).unwrap();
        b.copy_from_host(&[10i32, 20, 30, 40]).unwrap();
        s.reduce_async(&b, &a, DataType::Int32, ReduceOp::Sum)
            .unwrap();
        s.memcpy_async(&a, &b).unwrap();
        s.reduce_async(&b, &a, DataType::Int32, ReduceOp::Prod)
            .unwrap();
        s.synchronize().unwrap();
        assert!(s.query());
        assert_eq!(a.to_vec::<i32>(4).unwrap(), vec![11, 22, 33, 44]);
        assert_eq!(b.to_vec::<i32>(4).unwrap(), vec![121, 484, 1089, 1936]);
    }
}

#[test]
fn enqueue_validates_before_queueing() {
    let d = dev(ExecMode::Inline, None);
    let s = Stream::new(&d);
    let a = DeviceMem::alloc(16).unwrap();
    let b = DeviceMem::alloc(8).unwrap();
    let e = s.memcpy_async(&a, &b).unwrap_err();
    assert_eq!(e.code(), HcclResult::EPara);
    let e = s
        .reduce_async(
            &a.range(0, 6).unwrap(),
            &a.range(8, 6).unwrap(),
            DataType::Int32,
            ReduceOp::Sum,
        )
        .unwrap_err();
    assert!(e.to_string().contains("multiples of 4"), "{e}");
    assert!(s.query(), "nothing may be enqueued by a rejected call");
    // the buffers are not left pinned by the rejected calls
    a.copy_from_host(&[0u8; 16]).unwrap();
}

#[test]
fn notify_orders_two_streams() {
    for mode in [ExecMode::Inline, ExecMode::Worker] {
        let d = dev(mode, Some(5000));
        let main = Stream::new(&d);
        let side = Stream::new(&d);
        let n = Notify::new(&d);
        let a = DeviceMem::alloc(8).unwrap();
        let b = DeviceMem::alloc(8).unwrap();
        a.copy_from_host(&[5u64]).unwrap();
        // side waits for main's record, then copies a -> b; main's copy into
        // a must happen first.
        side.notify_wait(&n).unwrap();
        side.memcpy_async(&b, &a).unwrap();
        let c = DeviceMem::alloc(8).unwrap();
        c.copy_from_host(&[42u64]).unwrap();
        main.memcpy_async(&a, &c).unwrap();
        main.notify_record(&n).unwrap();
        side.synchronize().unwrap();
        main.synchronize().unwrap();
        assert_eq!(b.to_vec::<u64>(1).unwrap(), vec![42]);
    }
}

#[test]
fn callback_error_fails_stream_and_discards_rest() {
    let d = dev(ExecMode::Inline, None);
    let s = Stream::new(&d);
    let a = DeviceMem::alloc(4).unwrap();
    let b = DeviceMem::alloc(4).unwrap();
    b.copy_from_host(&[1u8, 2, 3, 4]).unwrap();
    s.host_callback(|| Err(HcclError::internal("callback says no")))
        .unwrap();
    s.memcpy_async(&a, &b).unwrap();
    let e = s.synchronize().unwrap_err();
    assert_eq!(e.code(), HcclResult::EInternal);
    assert!(e.to_string().contains("callback says no"));
    assert_eq!(
        a.to_vec::<u8>(4).unwrap(),
        vec![0; 4],
        "queued copy after the error must not run"
    );
    // the stream is usable again after the error was returned
    s.memcpy_async(&a, &b).unwrap();
    s.synchronize().unwrap();
    assert_eq!(a.to_vec::<u8>(4).unwrap(), vec![1, 2, 3, 4]);
}

#[test]
fn synchronize_until_returns_at_the_deadline_and_drives_on_later() {
    for mode in [ExecMode::Inline, ExecMode::Worker] {
        let d = dev(mode, None);
        let (main, side) = (Stream::new(&d), Stream::new(&d));
        let n = Notify::new(&d);
        let a = DeviceMem::alloc(8).unwrap();
        let b = DeviceMem::alloc(8).unwrap();
        b.copy_from_host(&[7u64]).unwrap();
        // main waits for a record nobody has made yet
        main.notify_wait(&n).unwrap();
        main.memcpy_async(&a, &b).unwrap();
        let t0 = Instant::now();
        let done = main
            .synchronize_until(Some(t0 + Duration::from_millis(30)))
            .unwrap();
        let took = t0.elapsed();
        assert!(!done, "{mode:?}: nothing can complete before the record");
        assert!(
            took >= Duration::from_millis(30) && took < Duration::from_millis(900),
            "{mode:?}: returned after {took:?}"
        );
        // a deadline already due still drives what is ready
        side.notify_record(&n).unwrap();
        let mut done = false;
        for _ in 0..1000 {
            if main.synchronize_until(Some(Instant::now())).unwrap() {
                done = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(done, "{mode:?}: the wait never completed");
        assert_eq!(a.to_vec::<u64>(1).unwrap(), vec![7]);
        assert!(main.synchronize_until(None).unwrap());
    }
}

fn endpoint(rank: u32, d: &Device, mem: &DeviceMem) -> InProcEndpoint {
    InProcEndpoint {
        rank,
        mems: vec![(MemKind::CclOutput, mem.clone())],
        waker: d.waker(),
        board: Some(InProcEndpoint::new_board().unwrap()),
    }
}

#[test]
fn link_transfers_between_threads() {
    for mode in [ExecMode::Inline, ExecMode::Worker] {
        let d0 = dev(mode, Some(10_000));
        let d1 = Device::new(1, d0.config().clone());
        let out0 = DeviceMem::alloc(64).unwrap();
        let out1 = DeviceMem::alloc(64).unwrap();
        let (l0, l1) = InProcLink::pair(&endpoint(0, &d0, &out0), &endpoint(1, &d1, &out1));
        let (l0, l1) = (LinkHandle::new(Arc::new(l0)), LinkHandle::new(Arc::new(l1)));
        let src1 = DeviceMem::alloc(16).unwrap();
        src1.copy_from_host(&[7u32, 8, 9, 10]).unwrap();
        let t = std::thread::spawn(move || {
            let s1 = Stream::new(&d1);
            for _ in 0..100 {
                l1.rx_ack(&s1).unwrap();
                l1.tx_async(MemKind::CclOutput, 32, &src1, &s1).unwrap();
                l1.tx_wait_done(&s1).unwrap();
            }
            s1.synchronize()
        });
        let s0 = Stream::new(&d0);
        for _ in 0..100 {
            l0.tx_ack(&s0).unwrap();
            l0.rx_wait_done(&s0).unwrap();
        }
        s0.synchronize().unwrap();
        t.join().unwrap().unwrap();
        assert_eq!(
            out0.range(32, 16).unwrap().to_vec::<u32>(4).unwrap(),
            vec![7, 8, 9, 10]
        );
    }
}

#[test]
fn missing_peer_times_out_with_context() {
    let d0 = dev(ExecMode::Inline, Some(200));
    let d1 = dev(ExecMode::Inline, Some(200));
    let m0 = DeviceMem::alloc(8).unwrap();
    let m1 = DeviceMem::alloc(8).unwrap();
    let (l0, _l1) = InProcLink::pair(&endpoint(0, &d0, &m0), &endpoint(1, &d1, &m1));
    let l0 = LinkHandle::new(Arc::new(l0));
    let s = Stream::new(&d0);
    s.set_label(Some(Arc::new(OpLabel {
        tag: "allreduce_7".into(),
        algorithm: "TestAlgo".into(),
        rank: 0,
    })));
    s.set_step(3);
    l0.rx_ack(&s).unwrap();
    let start = Instant::now();
    let e = s.synchronize().unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(5));
    assert_eq!(e.code(), HcclResult::ETimeout);
    let msg = e.to_string();
    for needle in [
        "RxAck",
        "peer rank 1",
        "step 3",
        "TestAlgo",
        "op tag 'allreduce_7'",
        "rank 0",
    ] {
        assert!(msg.contains(needle), "'{needle}' missing from: {msg}");
    }
}

#[test]
fn aborted_peer_fails_waiter_fast() {
    let d0 = dev(ExecMode::Inline, Some(20_000));
    let d1 = dev(ExecMode::Inline, Some(100));
    let m0 = DeviceMem::alloc(8).unwrap();
    let m1 = DeviceMem::alloc(8).unwrap();
    let (l0, l1) = InProcLink::pair(&endpoint(0, &d0, &m0), &endpoint(1, &d1, &m1));
    let (l0, l1) = (LinkHandle::new(Arc::new(l0)), LinkHandle::new(Arc::new(l1)));
    // rank 1 waits for a signal that never comes and times out after 100ms;
    // its link then tells rank 0, whose long wait ends with a remote error.
    let t = std::thread::spawn(move || {
        let s1 = Stream::new(&d1);
        l1.rx_data_signal(&s1).unwrap();
        s1.synchronize()
    });
    let s0 = Stream::new(&d0);
    l0.rx_ack(&s0).unwrap();
    let start = Instant::now();
    let e = s0.synchronize().unwrap_err();
    assert_eq!(t.join().unwrap().unwrap_err().code(), HcclResult::ETimeout);
    assert_eq!(e.code(), HcclResult::ERemote);
    assert!(e.to_string().contains("peer rank 1 failed"), "{e}");
    assert!(start.elapsed() < Duration::from_secs(10));
}

#[test]
fn rollback_removes_unstarted_tasks() {
    let d = dev(ExecMode::Inline, None);
    let s = Stream::new(&d);
    let a = DeviceMem::alloc(8).unwrap();
    let b = DeviceMem::alloc(8).unwrap();
    b.copy_from_host(&[3u8; 8]).unwrap();
    s.memcpy_async(&a, &b).unwrap();
    let mark = s.mark();
    s.memcpy_async(&b, &a).unwrap();
    s.reduce_async(&b, &a, DataType::Uint8, ReduceOp::Sum)
        .unwrap();
    assert!(s.rollback(mark, &HcclError::internal("x")));
    s.synchronize().unwrap();
    assert_eq!(a.to_vec::<u8>(8).unwrap(), vec![3; 8]);
    assert_eq!(
        b.to_vec::<u8>(8).unwrap(),
        vec![3; 8],
        "rolled-back tasks must not run"
    );
    assert!(s.query());
}

#[test]
fn task_stays_small() {
    // Tasks are queued by the thousand per op; keep them within two cache lines.
    assert!(
        std::mem::size_of::<Task>() <= 128,
        "Task is {} bytes",
        std::mem::size_of::<Task>()
    );
}

mod tcp {
    use super::*;
    use crate::link::{OpDesc, TcpNode};
    use std::io::Write;
    use std::net::TcpStream;

    fn node(rank: u32, d: &Device, uid: [u8; 16], mem: &DeviceMem) -> TcpNode {
        let n = TcpNode::start(
            rank,
            uid,
            "127.0.0.1:0".parse().unwrap(),
            d.waker(),
            Duration::from_secs(10),
        )
        .unwrap();
        n.register_mem(MemKind::CclOutput, mem.clone());
        d.add_park_hook(&n.park_hook());
        n
    }

    /// A node with `sockets` per link whose CCL output is `mem`.
    fn node_with(rank: u32, d: &Device, uid: [u8; 16], mem: &DeviceMem, sockets: usize) -> TcpNode {
        let options = crate::link::TcpOptions {
            io_timeout: Duration::from_secs(10),
            sockets_per_link: sockets,
            ..Default::default()
        };
        let n = TcpNode::start_with(
            rank,
            uid,
            "127.0.0.1:0".parse().unwrap(),
            d.waker(),
            options,
            &[(MemKind::CclOutput, mem.clone())],
        )
        .unwrap();
        d.add_park_hook(&n.park_hook());
        n
    }

    /// Links between rank 0 and rank 1 of two nodes (each end built on
    /// its own thread: the higher rank waits for the lower to connect).
    fn pair(n0: &TcpNode, n1: TcpNode, len: usize) -> (LinkHandle, LinkHandle, TcpNode) {
        let (a0, a1) = (n0.addr(), n1.addr());
        let t = std::thread::spawn(move || {
            let l = n1.link(0, a0, lens(len), Duration::from_secs(10)).unwrap();
            (LinkHandle::new(Arc::new(l)), n1)
        });
        let l0 = LinkHandle::new(Arc::new(
            n0.link(1, a1, lens(len), Duration::from_secs(10)).unwrap(),
        ));
        let (l1, n1) = t.join().unwrap();
        (l0, l1, n1)
    }

    /// Two inline devices, each with a CCL output of `cap` bytes and a
    /// node; rank 0 (the connecting one) opens `sockets` per link.
    struct Two {
        d0: Device,
        d1: Device,
        m1: DeviceMem,
        n0: TcpNode,
        n1: Option<TcpNode>,
        _m0: DeviceMem,
    }

    fn two(uid: u8, cap: usize, sockets: usize) -> Two {
        let (d0, d1) = (
            dev(ExecMode::Inline, Some(20_000)),
            dev(ExecMode::Inline, Some(20_000)),
        );
        let (m0, m1) = (
            DeviceMem::alloc(cap).unwrap(),
            DeviceMem::alloc(cap).unwrap(),
        );
        let n0 = node_with(0, &d0, [uid; 16], &m0, sockets);
        let n1 = Some(node_with(1, &d1, [uid; 16], &m1, 1));
        Two {
            d0,
            d1,
            m1,
            n0,
            n1,
            _m0: m0,
        }
    }

    impl Two {
        /// The link's two ends (rank 0's, rank 1's).
        fn link(&mut self) -> (LinkHandle, LinkHandle) {
            let n1 = self.n1.take().expect("linked once");
            let (l0, l1, n1) = pair(&self.n0, n1, self.m1.len());
            self.n1 = Some(n1);
            (l0, l1)
        }
    }

    fn bytes(n: usize, seed: u8) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    #[test]
    fn striped_links_deliver_every_byte_in_order() {
        // rank 1 asks for 1 socket, but the lower rank decides: 3
        let mut t = two(5, 4 << 20, 3);
        let (l0, l1) = t.link();
        let m1 = t.m1.clone();
        let (s0, s1) = (Stream::new(&t.d0), Stream::new(&t.d1));
        // striped (>= 256 KiB, not a multiple of 3 or 4 KiB), gathered,
        // eager and plain transfers back to back
        let sizes = [(1 << 20) + 13, 100, 300 << 10, 7, (256 << 10) + 1, 64 << 10];
        let srcs: Vec<DeviceMem> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let m = DeviceMem::alloc(n).unwrap();
                m.copy_from_host(&bytes(n, i as u8)).unwrap();
                m
            })
            .collect();
        let mut off = 0;
        let mut offs = Vec::new();
        for (i, src) in srcs.iter().enumerate() {
            l1.tx_ack(&s1).unwrap();
            if i % 2 == 0 {
                l0.rx_ack(&s0).unwrap();
                l0.tx_async(MemKind::CclOutput, off, src, &s0).unwrap();
            } else {
                l0.tx_after_ack(MemKind::CclOutput, off, src, &s0).unwrap();
            }
            l1.rx_wait_done(&s1).unwrap();
            offs.push(off);
            off += src.len();
        }
        let t = std::thread::spawn(move || s1.synchronize());
        s0.synchronize().unwrap();
        t.join().unwrap().unwrap();
        for (i, (src, off)) in srcs.iter().zip(offs).enumerate() {
            let got = m1
                .range(off, src.len())
                .unwrap()
                .to_vec::<u8>(src.len())
                .unwrap();
            assert!(
                got == bytes(src.len(), i as u8),
                "transfer {i} of {} bytes",
                src.len()
            );
        }
    }

    #[test]
    fn a_transfer_sent_before_the_ack_waits_for_it() {
        let mut t = two(6, 4096, 1);
        let (l0, l1) = t.link();
        let (d0, d1, m1) = (&t.d0, &t.d1, &t.m1);
        m1.copy_from_host(&[7u32, 7]).unwrap();
        let src = DeviceMem::alloc(8).unwrap();
        src.copy_from_host(&[1u32, 2]).unwrap();
        let (s0, s1) = (Stream::new(d0), Stream::new(d1));
        // rank 0 sends without waiting for rank 1's ack, then a signal
        l0.tx_after_ack(MemKind::CclOutput, 0, &src, &s0).unwrap();
        l0.tx_data_signal(&s0).unwrap();
        s0.synchronize().unwrap();
        // rank 1 reads both (the data first) before it acks: its buffer
        // is still its own
        l1.rx_data_signal(&s1).unwrap();
        s1.synchronize().unwrap();
        assert_eq!(m1.range(0, 8).unwrap().to_vec::<u32>(2).unwrap(), [7, 7]);
        // its ack lets the held transfer in
        l1.tx_ack(&s1).unwrap();
        l1.rx_wait_done(&s1).unwrap();
        s1.synchronize().unwrap();
        assert_eq!(m1.range(0, 8).unwrap().to_vec::<u32>(2).unwrap(), [1, 2]);
    }

    #[test]
    fn a_differing_descriptor_fails_the_links_next_wait() {
        let mut t = two(8, 4096, 1);
        let (l0, l1) = t.link();
        let (d0, d1) = (&t.d0, &t.d1);
        let mine = OpDesc {
            count: 100,
            ..Default::default()
        };
        let theirs = OpDesc {
            count: 64,
            ..Default::default()
        };
        let (s0, s1) = (Stream::new(d0), Stream::new(d1));
        for (l, s, (a, b)) in [(&l0, &s0, (mine, mine)), (&l1, &s1, (theirs, theirs))] {
            l.tx_desc(a, s).unwrap();
            l.rx_desc(b, s).unwrap();
            l.tx_ack(s).unwrap();
            l.rx_ack(s).unwrap();
        }
        let t = std::thread::spawn(move || s1.synchronize());
        let e0 = s0.synchronize().unwrap_err();
        let e1 = t.join().unwrap().unwrap_err();
        for (e, local, remote) in [(e0, 100, 64), (e1, 64, 100)] {
            assert_eq!(e.code(), HcclResult::EPara, "{e}");
            let msg = e.to_string();
            assert!(
                msg.contains(&format!(
                    "parameter count, local end {local}, remote end {remote}"
                )),
                "{msg}"
            );
        }
    }

    #[test]
    fn a_silent_newcomer_does_not_keep_a_peer_out() {
        let mut t = two(9, 4096, 1);
        let a1 = t.n1.as_ref().expect("not linked yet").addr();
        // more silent connections than the listener keeps waiting, and one
        // that sends half an introduction
        let silent: Vec<TcpStream> = (0..70).map(|_| TcpStream::connect(a1).unwrap()).collect();
        let mut half = TcpStream::connect(a1).unwrap();
        half.write_all(&0x4843_434cu32.to_le_bytes()).unwrap();
        let start = Instant::now();
        let (l0, l1) = t.link();
        let (d0, d1) = (&t.d0, &t.d1);
        assert!(
            start.elapsed() < Duration::from_secs(4),
            "the peer waited behind the strays for {:?}",
            start.elapsed()
        );
        let (s0, s1) = (Stream::new(d0), Stream::new(d1));
        l1.tx_data_signal(&s1).unwrap();
        l0.rx_data_signal(&s0).unwrap();
        s1.synchronize().unwrap();
        s0.synchronize().unwrap();
        drop(silent);
    }

    fn lens(n: usize) -> [Option<usize>; 5] {
        let mut l = [None; 5];
        l[MemKind::CclOutput.index()] = Some(n);
        l
    }

    #[test]
    fn transfers_both_ways_and_rejects_strangers() {
        let uid = [7u8; 16];
        let d0 = dev(ExecMode::Inline, Some(10_000));
        let d1 = dev(ExecMode::Inline, Some(10_000));
        let (m0, m1) = (
            DeviceMem::alloc(1 << 20).unwrap(),
            DeviceMem::alloc(1 << 20).unwrap(),
        );
        let (n0, n1) = (node(0, &d0, uid, &m0), node(1, &d1, uid, &m1));
        // strangers: garbage bytes and a wrong unique id are dropped
        let mut junk = TcpStream::connect(n1.addr()).unwrap();
        junk.write_all(b"GET / HTTP/1.0\r\n\r\n garbage garbage garbage")
            .unwrap();
        let mut wrong = TcpStream::connect(n1.addr()).unwrap();
        let mut hello = Vec::new();
        hello.extend_from_slice(&0x4843_434cu32.to_le_bytes());
        hello.extend_from_slice(&[9u8; 16]);
        hello.extend_from_slice(&0u32.to_le_bytes());
        hello.extend_from_slice(&1u32.to_le_bytes());
        wrong.write_all(&hello).unwrap();
        let a1 = n1.addr();
        let a0 = n0.addr();
        let t = std::thread::spawn(move || {
            let l1 = LinkHandle::new(Arc::new(
                n1.link(0, a0, lens(1 << 20), Duration::from_secs(10))
                    .unwrap(),
            ));
            let s1 = Stream::new(&d1);
            let src = DeviceMem::alloc(1 << 19).unwrap();
            src.copy_from_host(&(0..(1u32 << 17)).collect::<Vec<_>>())
                .unwrap();
            for _ in 0..3 {
                l1.tx_ack(&s1).unwrap(); // rank 0 may write into me
                l1.rx_ack(&s1).unwrap();
                l1.tx_async(MemKind::CclOutput, 4096, &src, &s1).unwrap();
                l1.tx_wait_done(&s1).unwrap();
                l1.rx_wait_done(&s1).unwrap();
            }
            s1.synchronize().unwrap();
            let got = m1.range(0, 8).unwrap().to_vec::<u32>(2).unwrap();
            (got, n1)
        });
        let l0 = LinkHandle::new(Arc::new(
            n0.link(1, a1, lens(1 << 20), Duration::from_secs(10))
                .unwrap(),
        ));
        let s0 = Stream::new(&d0);
        let small = DeviceMem::alloc(8).unwrap();
        small.copy_from_host(&[11u32, 22]).unwrap();
        for _ in 0..3 {
            l0.tx_ack(&s0).unwrap();
            l0.rx_ack(&s0).unwrap();
            l0.tx_async(MemKind::CclOutput, 0, &small, &s0).unwrap();
            l0.tx_wait_done(&s0).unwrap();
            l0.rx_wait_done(&s0).unwrap();
        }
        s0.synchronize().unwrap();
        let (got, _n1) = t.join().unwrap();
        assert_eq!(got, vec![11, 22]);
        let big = m0
            .range(4096, 1 << 19)
            .unwrap()
            .to_vec::<u32>(1 << 17)
            .unwrap();
        assert!(big.iter().enumerate().all(|(i, v)| *v == i as u32));
    }

    #[test]
    fn a_peer_that_goes_away_fails_the_waiter() {
        let uid = [3u8; 16];
        let d0 = dev(ExecMode::Inline, Some(20_000));
        let d1 = dev(ExecMode::Inline, Some(20_000));
        let (m0, m1) = (
            DeviceMem::alloc(4096).unwrap(),
            DeviceMem::alloc(4096).unwrap(),
        );
        let (n0, n1) = (node(0, &d0, uid, &m0), node(1, &d1, uid, &m1));
        let (a0, a1) = (n0.addr(), n1.addr());
        let t = std::thread::spawn(move || {
            let l = n1.link(0, a0, lens(4096), Duration::from_secs(10)).unwrap();
            drop(l);
            drop(n1); // closes the connection, as a dying process would
        });
        let l0 = LinkHandle::new(Arc::new(
            n0.link(1, a1, lens(4096), Duration::from_secs(10)).unwrap(),
        ));
        t.join().unwrap();
        let s0 = Stream::new(&d0);
        l0.rx_wait_done(&s0).unwrap();
        let start = Instant::now();
        let e = s0.synchronize().unwrap_err();
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "must not wait out the exec timeout"
        );
        assert_eq!(e.code(), HcclResult::ERemote);
        assert!(e.to_string().contains("peer rank 1"), "{e}");
    }
}

#[test]
fn fail_all_ends_every_wait_now_and_later() {
    for mode in [ExecMode::Inline, ExecMode::Worker] {
        let d = dev(mode, None);
        let (s1, s2) = (Stream::new(&d), Stream::new(&d));
        let never = Notify::new(&d);
        // two streams waiting forever, one driven by a synchronizer
        s1.notify_wait(&never).unwrap();
        s2.notify_wait(&never).unwrap();
        let d2 = d.clone();
        let failer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            d2.fail_all(HcclError::suspending("revoked by rank 3: test"));
        });
        let t = Instant::now();
        let e = s1.synchronize().unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        assert_eq!(e.code(), HcclResult::ESuspending, "{e}");
        assert!(e.message().starts_with("revoked by rank 3: test"), "{e}");
        assert!(e.message().contains("waiting for"), "{e}");
        failer.join().unwrap();
        let e = s2.synchronize().unwrap_err();
        assert!(e.message().starts_with("revoked by rank 3"), "{e}");
        assert!(s1.query() && s2.query());
        // a task queued afterwards fails too, and the first error stays
        d.fail_all(HcclError::internal("second"));
        s1.notify_wait(&never).unwrap();
        let e = s1.synchronize().unwrap_err();
        assert!(e.message().starts_with("revoked by rank 3"), "{e}");
        assert_eq!(
            d.failed_all().map(|e| e.code()),
            Some(HcclResult::ESuspending)
        );
    }
}

/// An observer sees every completed task, in stream order, with its stream
/// and what it did; a record and the wait it satisfies name one notify.
#[test]
fn a_task_observer_sees_every_completed_task() {
    #[derive(Default)]
    struct Seen(std::sync::Mutex<Vec<(u64, TaskDone)>>);
    impl TaskObserver for Seen {
        fn task_done(&self, stream: u64, done: TaskDone) {
            self.0.lock().unwrap().push((stream, done));
        }
    }
    let d = dev(ExecMode::Inline, None);
    let seen = std::sync::Arc::new(Seen::default());
    d.set_task_observer(seen.clone()).unwrap();
    let e = d.set_task_observer(seen.clone()).unwrap_err();
    assert_eq!(e.code(), HcclResult::EPara);
    assert!(e.message().contains("task observer already"), "{e}");
    let (s1, s2) = (Stream::new(&d), Stream::new(&d));
    let n = Notify::new(&d);
    let (a, b) = (DeviceMem::alloc(64).unwrap(), DeviceMem::alloc(64).unwrap());
    a.fill_bytes(1).unwrap();
    s2.notify_wait(&n).unwrap();
    s2.reduce_async(&b, &a, DataType::Int32, ReduceOp::Sum)
        .unwrap();
    s1.memcpy_async(&b, &a).unwrap();
    s1.notify_record(&n).unwrap();
    s1.synchronize().unwrap();
    s2.synchronize().unwrap();
    let seen = seen.0.lock().unwrap().clone();
    let on = |s: &Stream| -> Vec<TaskDone> {
        seen.iter()
            .filter(|(id, _)| *id == s.id())
            .map(|(_, d)| *d)
            .collect()
    };
    assert_eq!(
        on(&s1),
        vec![
            TaskDone::Copy { bytes: 64 },
            TaskDone::Record { notify: n.id() }
        ]
    );
    assert_eq!(
        on(&s2),
        vec![
            TaskDone::Wait { notify: n.id() },
            TaskDone::Reduce { bytes: 64 }
        ]
    );
    // the wait completed after the record that satisfied it
    let at = |d: TaskDone| seen.iter().position(|(_, x)| *x == d).unwrap();
    assert!(at(TaskDone::Record { notify: n.id() }) < at(TaskDone::Wait { notify: n.id() }));
}
