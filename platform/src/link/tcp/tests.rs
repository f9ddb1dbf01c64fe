//! Tests that need the node's insides: its sockets' buffer sizes and who
//! reads them.

use super::*;
use crate::link::LinkHandle;
use crate::stream::{Device, DeviceConfig, Stream};

const FRAME: usize = 64 << 10;
const FRAMES: usize = 16;

fn lens(n: usize) -> [Option<usize>; 5] {
    let mut l = [None; 5];
    l[MemKind::CclOutput.index()] = Some(n);
    l
}

fn device(timeout: Duration) -> Device {
    Device::new(
        0,
        DeviceConfig {
            exec_timeout: Some(timeout),
            ..Default::default()
        },
    )
}

fn node(rank: u32, d: &Device, uid: [u8; 16], mem: &DeviceMem) -> TcpNode {
    let n = TcpNode::start_with(
        rank,
        uid,
        "127.0.0.1:0".parse().unwrap(),
        d.waker(),
        TcpOptions::default(),
        &[(MemKind::CclOutput, mem.clone())],
    )
    .unwrap();
    d.add_park_hook(&n.park_hook());
    n
}

fn conn(n: &TcpNode, peer: u32) -> Arc<Conn> {
    n.shared.conns.lock().unwrap()[&peer].clone()
}

fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// A rank whose op completed with gathered frames still unwritten (the
/// peer's socket was full) drives no more: the frames must reach the
/// peer all the same. They once stayed in the out-buffer until the
/// device's next op, so a peer that waited for them (while this rank
/// waited for that peer on another communicator) waited forever.
#[test]
fn frames_left_by_a_full_socket_go_out_after_the_op() {
    let uid = [42u8; 16];
    let (d0, d1) = (
        device(Duration::from_secs(30)),
        device(Duration::from_secs(5)),
    );
    let (m0, m1) = (
        DeviceMem::alloc(FRAME).unwrap(),
        DeviceMem::alloc(FRAME * FRAMES).unwrap(),
    );
    let n0 = node(0, &d0, uid, &m0);
    let n1 = node(1, &d1, uid, &m1);
    let (a0, a1) = (n0.addr(), n1.addr());
    let len = m1.len();
    let t = std::thread::spawn(move || {
        let l = n1.link(0, a0, lens(len), Duration::from_secs(10)).unwrap();
        (LinkHandle::new(Arc::new(l)), n1)
    });
    let l0 = LinkHandle::new(Arc::new(
        n0.link(1, a1, lens(len), Duration::from_secs(10)).unwrap(),
    ));
    let (l1, n1) = t.join().unwrap();

    // Small socket buffers, and rank 1 reads nothing for now (its driver
    // is busy elsewhere, as after a wait it polled itself): rank 0's
    // megabyte cannot all leave while its op runs.
    use nix::sys::socket::{setsockopt, sockopt};
    setsockopt(&conn(&n0, 1).socks[0], sockopt::SndBuf, &4096).unwrap();
    // (rank 1 keeps its default receive buffer: a tiny one would make
    // the kernel probe a zero window, slowly, once rank 1 reads)
    n1.shared.thread_reads.store(false, Ordering::Release);
    // rank 0's driver too has polled a wait of its own: it reads its
    // sockets itself, until it parks
    n0.shared.thread_reads.store(false, Ordering::Release);

    // rank 0: 16 transfers of 64 KiB, each gathered (no ack needed), so
    // the op completes at once whatever the socket takes
    let s0 = Stream::new(&d0);
    let srcs: Vec<DeviceMem> = (0..FRAMES)
        .map(|i| {
            let m = DeviceMem::alloc(FRAME).unwrap();
            m.copy_from_host(&bytes(FRAME, i as u8)).unwrap();
            m
        })
        .collect();
    for (i, src) in srcs.iter().enumerate() {
        l0.tx_async(MemKind::CclOutput, i * FRAME, src, &s0)
            .unwrap();
        l0.tx_wait_done(&s0).unwrap();
    }
    s0.synchronize().unwrap();
    assert!(
        conn(&n0, 1).has_out.load(Ordering::Acquire),
        "the test needs rank 0's op to end with frames unwritten"
    );

    // rank 1 now waits for all of them; rank 0 drives no more
    let s1 = Stream::new(&d1);
    for _ in 0..FRAMES {
        l1.rx_wait_done(&s1).unwrap();
    }
    let r = s1.synchronize();
    assert!(
        r.is_ok(),
        "rank 1 never got what rank 0's completed op sent: {r:?}"
    );
    for i in 0..FRAMES {
        let got = m1.range(i * FRAME, FRAME).unwrap().to_vec::<u8>(FRAME);
        assert!(got.unwrap() == bytes(FRAME, i as u8), "transfer {i}");
    }
    drop((l0, l1, n1, n0));
}
