//! Transports as components: a crate outside the platform registers its
//! own component at run time; the framework picks it by its score, by
//! the user's order, or passes it over when a tune string lowers it; and
//! it carries real AllReduces (results checked).
//!
//! The component wraps the built-in TCP one and counts the links it
//! connects, so the test can tell which component carried them.

use hccl_adapter::{CommConfig, DeviceBuffer, HcclComm, ReduceOp};
use hccl_platform::transport::{
    register_transport, Capabilities, ContextSetup, PeerInfo, Placement, ScoreMap, Transport,
    TransportContext, TransportParams,
};
use hccl_platform::{HcclResult, LinkHandle, ParkHook, Result, TcpTransport};
use hccl_tests::{expected_value, input_value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Once};
use std::time::Duration;

const NAME: &str = "tcp-counted";

/// Links the component connected, in this process.
static CONNECTED: AtomicUsize = AtomicUsize::new(0);

/// TCP under another name, scored above every built-in.
#[derive(Debug)]
struct Counted;

impl Transport for Counted {
    fn name(&self) -> &'static str {
        NAME
    }
    fn capabilities(&self) -> Capabilities {
        TcpTransport.capabilities()
    }
    fn default_scores(&self) -> ScoreMap {
        ScoreMap::uniform(80)
    }
    fn open(
        &self,
        setup: &ContextSetup,
        explicit: bool,
    ) -> Result<Option<Arc<dyn TransportContext>>> {
        Ok(TcpTransport
            .open(setup, explicit)?
            .map(|inner| Arc::new(CountedContext { inner }) as Arc<dyn TransportContext>))
    }
}

#[derive(Debug)]
struct CountedContext {
    inner: Arc<dyn TransportContext>,
}

impl TransportContext for CountedContext {
    fn address(&self) -> Vec<u8> {
        self.inner.address()
    }
    fn prepare(&self, placement: Placement, peers: &[PeerInfo<'_>]) -> Result<()> {
        self.inner.prepare(placement, peers)
    }
    fn can_connect(&self, peer: &PeerInfo<'_>) -> bool {
        self.inner.can_connect(peer)
    }
    fn connect(&self, peer: &PeerInfo<'_>, timeout: Duration) -> Result<LinkHandle> {
        let link = self.inner.connect(peer, timeout)?;
        CONNECTED.fetch_add(1, Ordering::Relaxed);
        Ok(link)
    }
    fn park_hook(&self) -> Option<Arc<dyn ParkHook>> {
        self.inner.park_hook()
    }
}

fn register() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| register_transport(Arc::new(Counted)).unwrap());
}

/// `p` ranks as threads that form a communicator through root info (the
/// multi-process path: every registered component opens), run
/// AllReduces of several sizes and check them. Returns the links the
/// counted component connected.
fn allreduce_over(p: u32, config: CommConfig) -> usize {
    let before = CONNECTED.load(Ordering::Relaxed);
    let mut root_config = config.clone();
    root_config.if_ip = Some("127.0.0.1".into());
    let root = HcclComm::get_root_info_with(&root_config).unwrap();
    let handles: Vec<_> = (0..p)
        .map(|r| {
            let (root, mut config) = (root.clone(), config.clone());
            config.if_ip = Some("127.0.0.1".into());
            std::thread::spawn(move || {
                let comm = HcclComm::init_root_info_with(p, &root, r, config).unwrap();
                let stream = comm.create_stream();
                for count in [2usize, 1000, (1 << 18) + 3] {
                    let input: Vec<f32> = (0..count)
                        .map(|i| input_value(ReduceOp::Sum, r, i))
                        .collect();
                    let send = DeviceBuffer::from_slice(&input).unwrap();
                    let mut recv = DeviceBuffer::<f32>::alloc(count).unwrap();
                    comm.all_reduce(&send, &mut recv, ReduceOp::Sum, &stream)
                        .unwrap();
                    stream.synchronize().unwrap();
                    for (i, g) in recv.to_vec().unwrap().iter().enumerate() {
                        assert_eq!(
                            *g,
                            expected_value::<f32>(ReduceOp::Sum, p, i),
                            "count {count} element {i}"
                        );
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("a rank failed");
    }
    CONNECTED.load(Ordering::Relaxed) - before
}

fn config() -> CommConfig {
    CommConfig {
        connect_timeout: Duration::from_secs(20),
        ..CommConfig::default()
    }
}

/// Highest score under `auto`: the user's component carries every link,
/// above shared memory (50) and TCP (10).
#[test]
fn a_registered_component_wins_by_its_score_and_carries_allreduce() {
    register();
    let links = allreduce_over(3, config());
    assert!(
        links >= 6,
        "3 ranks, 2 peers each over {NAME}: {links} links"
    );
}

/// A tune string scoring it below shared memory hands the links back to
/// shm; named first in `HCCL_RS_TRANSPORT`, it carries them whatever the
/// scores.
#[test]
fn tune_strings_and_the_users_order_decide_against_the_defaults() {
    register();
    let mut low = config();
    low.transport_params = TransportParams(vec![(
        "HCCL_RS_TL_TCP_COUNTED_TUNE".into(),
        "level0:5".into(),
    )]);
    // level 0 (one host): shm wins; nothing goes over the component
    let links = allreduce_over(2, low.clone());
    assert_eq!(links, 0, "tuned below shm, yet {links} links over {NAME}");
    // the user's order beats the scores
    low.transport = format!("{NAME},shm");
    let links = allreduce_over(2, low);
    assert!(links >= 2, "listed first, yet {links} links over {NAME}");
}

/// Bad orders and duplicate names are refused with clear errors.
#[test]
fn bad_transport_settings_are_refused_by_name() {
    register();
    let e = register_transport(Arc::new(Counted)).unwrap_err();
    assert_eq!(e.code(), HcclResult::EPara);
    assert!(e.to_string().contains("already registered"), "{e}");
    let mut c = config();
    c.transport = "shm,carrier-pigeon".into();
    c.if_ip = Some("127.0.0.1".into());
    let root = HcclComm::get_root_info_with(&c).unwrap();
    let e = HcclComm::init_root_info_with(1, &root, 0, c).unwrap_err();
    assert_eq!(e.code(), HcclResult::EPara);
    assert!(
        e.to_string().contains("no transport 'carrier-pigeon'"),
        "{e}"
    );
    assert!(
        e.to_string().contains(NAME),
        "the registered names are listed: {e}"
    );
}
