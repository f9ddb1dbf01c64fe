//! Fuzz targets of the C API's argument checking: every call with random
//! handles (live, null, destroyed, forged), pointers (null, or valid for
//! what the call may touch), counts, data types, reduce ops, roots and
//! peers, and random `HcclCommConfig` and root-info bytes.
//!
//! Properties: every call returns an HCCL code (never a panic, which the
//! boundary would report as `HCCL_E_INTERNAL`); a call that succeeds
//! completes on its stream; no case takes longer than [`CASE_LIMIT`].
//! Pointers are only ever null or valid, as the C contract requires:
//! device buffers come from `aclrtMalloc` (the library checks counts
//! against their size), the one host buffer is used only with counts that
//! fit it. Cases per target: `PROPTEST_CASES` (default [`DEFAULT_CASES`]);
//! `tools/fuzz.sh` runs them with a million.

use hccl::acl::*;
use hccl::hccl::*;
use hccl::last_error_message;
use hccl::types::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::ffi::{c_void, CStr};
use std::ptr::{null, null_mut};
use std::time::{Duration, Instant};

const DEFAULT_CASES: u32 = 2000;
const CASE_LIMIT: Duration = Duration::from_secs(5);
const E_INTERNAL: u32 = 4;
/// Bytes of each device buffer and of the host buffer.
const BUF: usize = 4096;

fn runner() -> TestRunner {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(DEFAULT_CASES);
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    })
}

/// What the calls of one target share: a one-rank communicator (collectives
/// complete without peers), a stale handle, a stream and buffers.
struct Fixture {
    comm: usize,
    destroyed: usize,
    stream: usize,
    dev_a: usize,
    dev_b: usize,
    host: usize,
}

impl Fixture {
    fn new() -> Fixture {
        // a short execution timeout: an op accepted that cannot complete
        // (say, a send to oneself) fails a case instead of stalling it
        std::env::set_var("HCCL_EXEC_TIMEOUT", "3");
        std::env::set_var("HCCL_BUFFSIZE", "1");
        assert_eq!(aclrtSetDevice(0), 0);
        let one = || {
            let mut dev = [0i32];
            let mut c = null_mut();
            assert_eq!(
                HcclCommInitAll(1, dev.as_mut_ptr(), &mut c),
                0,
                "{:?}",
                last_error_message()
            );
            c as usize
        };
        let comm = one();
        let destroyed = one();
        assert_eq!(HcclCommDestroy(destroyed as HcclComm), 0);
        let mut stream = null_mut();
        assert_eq!(aclrtCreateStream(&mut stream), 0);
        let dev = || {
            let mut p = null_mut();
            assert_eq!(aclrtMalloc(&mut p, BUF, 0), 0);
            p as usize
        };
        let (dev_a, dev_b) = (dev(), dev());
        let host = Box::leak(vec![0u64; BUF / 8].into_boxed_slice()).as_mut_ptr() as usize;
        Fixture {
            comm,
            destroyed,
            stream: stream as usize,
            dev_a,
            dev_b,
            host,
        }
    }

    fn comm(&self, c: CommArg) -> HcclComm {
        (match c {
            CommArg::Live => self.comm,
            CommArg::Null => 0,
            CommArg::Destroyed => self.destroyed,
            CommArg::Forged(v) => v,
        }) as HcclComm
    }

    fn stream(&self, s: StreamArg) -> aclrtStream {
        (match s {
            StreamArg::Live => self.stream,
            StreamArg::Null => 0,
            StreamArg::Forged(v) => v,
        }) as aclrtStream
    }

    fn ptr(&self, p: PtrArg) -> *mut c_void {
        (match p {
            PtrArg::Null => 0,
            PtrArg::DevA => self.dev_a,
            PtrArg::DevB => self.dev_b,
            PtrArg::DevAAt(off) => self.dev_a + off % BUF,
            PtrArg::Host => self.host,
        }) as *mut c_void
    }
}

#[derive(Clone, Copy, Debug)]
enum CommArg {
    Live,
    Null,
    Destroyed,
    /// Any number, often with the communicator registry's tag byte.
    Forged(usize),
}

#[derive(Clone, Copy, Debug)]
enum StreamArg {
    Live,
    Null,
    Forged(usize),
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum PtrArg {
    Null,
    DevA,
    DevB,
    DevAAt(usize),
    Host,
}

fn comm_arg() -> impl Strategy<Value = CommArg> {
    prop_oneof![
        8 => Just(CommArg::Live),
        1 => Just(CommArg::Null),
        1 => Just(CommArg::Destroyed),
        1 => any::<usize>().prop_map(|v| CommArg::Forged((v & !0xff) | 0x1c)),
        1 => any::<usize>().prop_map(CommArg::Forged),
    ]
}

fn stream_arg() -> impl Strategy<Value = StreamArg> {
    prop_oneof![
        8 => Just(StreamArg::Live),
        2 => Just(StreamArg::Null),
        1 => any::<usize>().prop_map(|v| StreamArg::Forged((v & !0xff) | 0x2c)),
        1 => any::<usize>().prop_map(StreamArg::Forged),
    ]
}

fn ptr_arg() -> impl Strategy<Value = PtrArg> {
    prop_oneof![
        2 => Just(PtrArg::Null),
        4 => Just(PtrArg::DevA),
        4 => Just(PtrArg::DevB),
        2 => any::<usize>().prop_map(PtrArg::DevAAt),
        2 => Just(PtrArg::Host),
    ]
}

/// Element counts: small ones (that fit the buffers), and the extremes
/// where byte sizes overflow.
fn count() -> impl Strategy<Value = u64> {
    prop_oneof![
        6 => 0u64..600,
        1 => any::<u64>(),
        1 => Just(u64::MAX),
        1 => Just(1u64 << 61),
        1 => Just(u64::MAX / 2 + 1),
    ]
}

/// Codes: mostly the valid range, sometimes anything.
fn code(valid: u32) -> impl Strategy<Value = u32> {
    prop_oneof![8 => 0..valid + 2, 1 => any::<u32>(), 1 => Just(u32::MAX)]
}

/// A rank: 0 (the only one), just out of range, or anything.
fn rank() -> impl Strategy<Value = u32> {
    prop_oneof![6 => Just(0u32), 2 => 1u32..3, 1 => any::<u32>()]
}

/// One `HcclSendRecvItem`: type, buffer, count, data type, peer.
type Item = (u32, PtrArg, u64, u32, u32);

/// One collective or point-to-point call.
#[derive(Clone, Debug)]
enum Call {
    AllReduce(PtrArg, PtrArg, u64, u32, u32),
    Broadcast(PtrArg, u64, u32, u32),
    ReduceScatter(PtrArg, PtrArg, u64, u32, u32),
    ReduceScatterV(PtrArg, Option<[u64; 2]>, PtrArg, u64, u32, u32),
    Scatter(PtrArg, PtrArg, u64, u32, u32),
    AllGather(PtrArg, PtrArg, u64, u32),
    AllGatherV(PtrArg, u64, PtrArg, Option<[u64; 2]>, u32),
    Reduce(PtrArg, PtrArg, u64, u32, u32, u32),
    AlltoAll(PtrArg, u64, u32, PtrArg, u64, u32),
    AlltoAllV(PtrArg, Option<[u64; 2]>, u32, PtrArg, Option<[u64; 2]>, u32),
    Send(PtrArg, u64, u32, u32),
    Recv(PtrArg, u64, u32, u32),
    /// The items (or a null array) and the item count passed.
    Batch(Option<Vec<Item>>, u32),
    Barrier,
}

/// A V op's (count, displacement) for the one rank, or a null array.
fn layout() -> impl Strategy<Value = Option<[u64; 2]>> {
    prop_oneof![
        1 => Just(None),
        6 => (count(), count()).prop_map(|(c, d)| Some([c, d])),
    ]
}

fn call() -> impl Strategy<Value = Call> {
    let dt = || code(12);
    let op = || code(4);
    prop_oneof![
        (ptr_arg(), ptr_arg(), count(), dt(), op())
            .prop_map(|(a, b, n, d, o)| Call::AllReduce(a, b, n, d, o)),
        (ptr_arg(), count(), dt(), rank()).prop_map(|(a, n, d, r)| Call::Broadcast(a, n, d, r)),
        (ptr_arg(), ptr_arg(), count(), dt(), op())
            .prop_map(|(a, b, n, d, o)| Call::ReduceScatter(a, b, n, d, o)),
        (ptr_arg(), layout(), ptr_arg(), count(), dt(), op())
            .prop_map(|(a, l, b, n, d, o)| Call::ReduceScatterV(a, l, b, n, d, o)),
        (ptr_arg(), ptr_arg(), count(), dt(), rank())
            .prop_map(|(a, b, n, d, r)| Call::Scatter(a, b, n, d, r)),
        (ptr_arg(), ptr_arg(), count(), dt()).prop_map(|(a, b, n, d)| Call::AllGather(a, b, n, d)),
        (ptr_arg(), count(), ptr_arg(), layout(), dt())
            .prop_map(|(a, n, b, l, d)| Call::AllGatherV(a, n, b, l, d)),
        (ptr_arg(), ptr_arg(), count(), dt(), op(), rank())
            .prop_map(|(a, b, n, d, o, r)| Call::Reduce(a, b, n, d, o, r)),
        (ptr_arg(), count(), dt(), ptr_arg(), count(), dt())
            .prop_map(|(a, n, d, b, m, e)| Call::AlltoAll(a, n, d, b, m, e)),
        (ptr_arg(), layout(), dt(), ptr_arg(), layout(), dt())
            .prop_map(|(a, l, d, b, m, e)| Call::AlltoAllV(a, l, d, b, m, e)),
        (ptr_arg(), count(), dt(), rank()).prop_map(|(a, n, d, r)| Call::Send(a, n, d, r)),
        (ptr_arg(), count(), dt(), rank()).prop_map(|(a, n, d, r)| Call::Recv(a, n, d, r)),
        (
            proptest::option::weighted(
                0.9,
                proptest::collection::vec((code(1), ptr_arg(), count(), dt(), rank()), 0..4)
            ),
            prop_oneof![Just(u32::MAX), 0u32..5],
        )
            .prop_map(|(items, n)| Call::Batch(items, n)),
        Just(Call::Barrier),
    ]
}

impl Call {
    /// Whether the host buffer is among the arguments: then every count
    /// must fit it (the library cannot check memory it did not allocate;
    /// the C contract makes the caller's buffers large enough).
    fn uses_host(&self) -> bool {
        use Call::*;
        let h = |p: &PtrArg| *p == PtrArg::Host;
        match self {
            AllReduce(a, b, ..) | ReduceScatter(a, b, ..) | Scatter(a, b, ..) => h(a) || h(b),
            AllGather(a, b, ..) | Reduce(a, b, ..) => h(a) || h(b),
            ReduceScatterV(a, _, b, ..) | AllGatherV(a, _, b, ..) => h(a) || h(b),
            AlltoAll(a, _, _, b, ..) | AlltoAllV(a, _, _, b, ..) => h(a) || h(b),
            Broadcast(a, ..) | Send(a, ..) | Recv(a, ..) => h(a),
            Batch(items, _) => items.iter().flatten().any(|i| h(&i.1)),
            Barrier => false,
        }
    }

    /// Every count and displacement reduced so that the bytes they span
    /// fit the host buffer at the widest type (8 bytes): a C caller's
    /// contract when it passes its own memory.
    fn fit_host(&mut self) {
        use Call::*;
        let fit = |n: &mut u64| *n %= (BUF / 8 / 2) as u64;
        let fit_l = |l: &mut Option<[u64; 2]>| {
            if let Some([c, d]) = l {
                fit(c);
                fit(d);
            }
        };
        match self {
            AllReduce(_, _, n, ..) | ReduceScatter(_, _, n, ..) | Scatter(_, _, n, ..) => fit(n),
            AllGather(_, _, n, _) | Reduce(_, _, n, ..) | Broadcast(_, n, ..) => fit(n),
            Send(_, n, ..) | Recv(_, n, ..) => fit(n),
            ReduceScatterV(_, l, _, n, ..) => {
                fit_l(l);
                fit(n)
            }
            AllGatherV(_, n, _, l, _) => {
                fit_l(l);
                fit(n)
            }
            AlltoAll(_, n, _, _, m, _) => {
                fit(n);
                fit(m)
            }
            AlltoAllV(_, l, _, _, m, _) => {
                fit_l(l);
                fit_l(m)
            }
            Batch(items, _) => items.iter_mut().flatten().for_each(|i| fit(&mut i.2)),
            Barrier => {}
        }
    }

    fn run(&self, f: &Fixture, comm: HcclComm, stream: aclrtStream) -> u32 {
        use Call::*;
        let p = |a: PtrArg| f.ptr(a);
        // a V op's arrays live for the call (rank size 1: one entry each)
        let arrays = |l: &Option<[u64; 2]>| l.map(|[c, d]| ([c], [d]));
        let cp = |a: &Option<([u64; 1], [u64; 1])>, i: usize| match a {
            Some((c, d)) => {
                if i == 0 {
                    c.as_ptr().cast::<c_void>()
                } else {
                    d.as_ptr().cast()
                }
            }
            None => null(),
        };
        match self {
            AllReduce(a, b, n, d, o) => HcclAllReduce(p(*a), p(*b), *n, *d, *o, comm, stream),
            Broadcast(a, n, d, r) => HcclBroadcast(p(*a), *n, *d, *r, comm, stream),
            ReduceScatter(a, b, n, d, o) => {
                HcclReduceScatter(p(*a), p(*b), *n, *d, *o, comm, stream)
            }
            ReduceScatterV(a, l, b, n, d, o) => {
                let v = arrays(l);
                HcclReduceScatterV(p(*a), cp(&v, 0), cp(&v, 1), p(*b), *n, *d, *o, comm, stream)
            }
            Scatter(a, b, n, d, r) => HcclScatter(p(*a), p(*b), *n, *d, *r, comm, stream),
            AllGather(a, b, n, d) => HcclAllGather(p(*a), p(*b), *n, *d, comm, stream),
            AllGatherV(a, n, b, l, d) => {
                let v = arrays(l);
                HcclAllGatherV(p(*a), *n, p(*b), cp(&v, 0), cp(&v, 1), *d, comm, stream)
            }
            Reduce(a, b, n, d, o, r) => HcclReduce(p(*a), p(*b), *n, *d, *o, *r, comm, stream),
            AlltoAll(a, n, d, b, m, e) => HcclAlltoAll(p(*a), *n, *d, p(*b), *m, *e, comm, stream),
            AlltoAllV(a, l, d, b, m, e) => {
                let (v, w) = (arrays(l), arrays(m));
                HcclAlltoAllV(
                    p(*a),
                    cp(&v, 0),
                    cp(&v, 1),
                    *d,
                    p(*b),
                    cp(&w, 0),
                    cp(&w, 1),
                    *e,
                    comm,
                    stream,
                )
            }
            Send(a, n, d, r) => HcclSend(p(*a), *n, *d, *r, comm, stream),
            Recv(a, n, d, r) => HcclRecv(p(*a), *n, *d, *r, comm, stream),
            Batch(items, n) => {
                let mut raw: Vec<HcclSendRecvItem> = items
                    .iter()
                    .flatten()
                    .map(|&(t, b, c, d, r)| HcclSendRecvItem {
                        sendRecvType: t,
                        buf: p(b),
                        count: c,
                        dataType: d,
                        remoteRank: r,
                    })
                    .collect();
                // the item count never exceeds the array (C contract);
                // with no array, any count
                let (ptr, num) = match items {
                    Some(_) => (raw.as_mut_ptr(), (*n).min(raw.len() as u32)),
                    None => (null_mut(), *n),
                };
                HcclBatchSendRecv(ptr, num, comm, stream)
            }
            Barrier => HcclBarrier(comm, stream),
        }
    }
}

/// Runs one case under the time bound; fails on `HCCL_E_INTERNAL` (a
/// panic caught at the boundary) or an unknown code.
fn check_code(what: &str, code: u32) -> Result<(), TestCaseError> {
    prop_assert!(
        code != E_INTERNAL,
        "{what}: HCCL_E_INTERNAL: {:?}",
        last_error_message()
    );
    prop_assert!(
        !HcclGetErrorString(code).is_null() && code <= 21,
        "{what}: unknown code {code}"
    );
    Ok(())
}

fn within_limit(what: &str, start: Instant) -> Result<(), TestCaseError> {
    let took = start.elapsed();
    prop_assert!(took < CASE_LIMIT, "{what}: took {took:?}");
    Ok(())
}

/// Collectives and point-to-point calls with random arguments.
#[test]
fn fuzz_c_api_collectives() {
    let f = Fixture::new();
    let strategy = (call(), comm_arg(), stream_arg());
    // codes seen, to show what the cases reached (printed at the end)
    let codes = std::cell::RefCell::new(std::collections::BTreeMap::<u32, u32>::new());
    runner()
        .run(&strategy, |(mut call, c, s)| {
            if call.uses_host() {
                call.fit_host();
            }
            let start = Instant::now();
            let (comm, stream) = (f.comm(c), f.stream(s));
            let code = call.run(&f, comm, stream);
            *codes.borrow_mut().entry(code).or_default() += 1;
            check_code(&format!("{call:?}"), code)?;
            if code == 0 {
                // what was accepted completes (one rank: no peer to wait for)
                let sync = aclrtSynchronizeStream(stream);
                prop_assert_eq!(
                    sync,
                    0,
                    "{:?} was accepted but failed on its stream: {:?}",
                    call,
                    last_error_message()
                );
            }
            within_limit(&format!("{call:?}"), start)
        })
        .unwrap();
    eprintln!("codes returned (code: calls): {:?}", codes.borrow());
}

/// Queries and process-wide options with random handles and pointers.
#[test]
fn fuzz_c_api_queries() {
    let f = Fixture::new();
    let strategy = (
        0u8..7,
        comm_arg(),
        any::<bool>(),
        any::<u32>(),
        any::<i32>(),
    );
    runner()
        .run(&strategy, |(which, c, out_null, n, v)| {
            let start = Instant::now();
            let comm = f.comm(c);
            let mut word = 0u32;
            let mut name = [0 as std::ffi::c_char; COMM_NAME_MAX_LENGTH];
            let out = |p: *mut u32| if out_null { null_mut() } else { p };
            let code = match which {
                0 => HcclGetRankSize(comm, out(&mut word)),
                1 => HcclGetRankId(comm, out(&mut word)),
                2 => HcclGetCommName(
                    comm,
                    if out_null {
                        null_mut()
                    } else {
                        name.as_mut_ptr()
                    },
                ),
                3 => HcclGetCommAsyncError(comm, out(&mut word)),
                4 => HcclSetConfig(n % 3, HcclConfigValue { value: v }),
                5 => {
                    let mut cv = HcclConfigValue { value: 0 };
                    HcclGetConfig(n % 3, if out_null { null_mut() } else { &mut cv })
                }
                _ => {
                    // any code has a description
                    // SAFETY: HcclGetErrorString returns a static C string.
                    let s = unsafe { CStr::from_ptr(HcclGetErrorString(n)) };
                    prop_assert!(!s.to_bytes().is_empty());
                    0
                }
            };
            check_code(&format!("query {which}"), code)?;
            if which == 2 && code == 0 {
                prop_assert!(name.contains(&0), "the name is NUL-terminated");
            }
            within_limit("query", start)
        })
        .unwrap();
    // leave the process-wide option as the other tests expect it
    assert_eq!(
        HcclSetConfig(HCCL_DETERMINISTIC, HcclConfigValue { value: 0 }),
        0
    );
}

/// An `HcclCommConfig` that prints (for a failing case's report).
#[derive(Clone, Copy)]
struct Cfg(HcclCommConfig);

impl std::fmt::Debug for Cfg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = &self.0;
        f.debug_struct("HcclCommConfig")
            .field("header", &c.reserved.map(|b| b as u8))
            .field("hcclBufferSize", &c.hcclBufferSize)
            .field("hcclDeterministic", &c.hcclDeterministic)
            .field("hcclCommName", &c.hcclCommName.map(|b| b as u8))
            .field("hcclOpExpansionMode", &c.hcclOpExpansionMode)
            .finish()
    }
}

/// An `HcclRootInfo` that prints its first bytes.
#[derive(Clone, Copy)]
struct Blob(HcclRootInfo);

impl std::fmt::Debug for Blob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let head: Vec<u8> = self.0.internal[..96].iter().map(|&b| b as u8).collect();
        write!(f, "HcclRootInfo({head:?}...)")
    }
}

/// A random `HcclCommConfig`: the real header or random bytes, fields of
/// any value, names with and without their NUL.
fn comm_config() -> impl Strategy<Value = Cfg> {
    let header = prop_oneof![
        3 => (prop_oneof![
            Just(std::mem::size_of::<HcclCommConfig>()),
            0usize..400,
            any::<usize>(),
        ], prop_oneof![3 => Just(HCCL_COMM_CONFIG_MAGIC_WORD), 1 => any::<u32>()], any::<u32>())
            .prop_map(|(size, magic, version)| {
                let mut h = [0 as std::ffi::c_char; HCCL_COMM_CONFIG_INFO_BYTES];
                let mut b = [0u8; HCCL_COMM_CONFIG_INFO_BYTES];
                b[0..8].copy_from_slice(&size.to_ne_bytes());
                b[8..12].copy_from_slice(&magic.to_ne_bytes());
                b[12..16].copy_from_slice(&version.to_ne_bytes());
                for (d, s) in h.iter_mut().zip(b) {
                    *d = s as std::ffi::c_char;
                }
                h
            }),
        1 => any::<[u8; HCCL_COMM_CONFIG_INFO_BYTES]>().prop_map(|b| b.map(|x| x as std::ffi::c_char)),
    ];
    let word = || prop_oneof![Just(HCCL_CONFIG_NOT_SET), 0u32..5, any::<u32>()];
    let name = proptest::collection::vec(any::<u8>(), COMM_NAME_MAX_LENGTH).prop_map(|v| {
        let mut n = [0 as std::ffi::c_char; COMM_NAME_MAX_LENGTH];
        for (d, s) in n.iter_mut().zip(v) {
            *d = s as std::ffi::c_char;
        }
        n
    });
    (header, word(), word(), name, word(), word(), word()).prop_map(
        |(reserved, buf, det, name, mode, tc, sl)| {
            Cfg(HcclCommConfig {
                reserved,
                hcclBufferSize: buf,
                hcclDeterministic: det,
                hcclCommName: name,
                hcclUdi: [0; UDI_MAX_LENGTH],
                hcclOpExpansionMode: mode,
                hcclRdmaTrafficClass: tc,
                hcclRdmaServiceLevel: sl,
                ..HcclCommConfig::default()
            })
        },
    )
}

/// Root-info blobs that never name a reachable root: random bytes, or the
/// real magic with an address field that is not an address.
fn root_blob() -> impl Strategy<Value = Blob> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..64),
        "[g-z%/ ]{0,60}".prop_map(|junk| {
            let mut b = b"HRS1".to_vec();
            b.resize(28, 1);
            b.extend_from_slice(junk.as_bytes());
            b
        }),
    ]
    .prop_map(|head| {
        let mut info = HcclRootInfo {
            internal: [0; HCCL_ROOT_INFO_BYTES],
        };
        for (d, s) in info.internal.iter_mut().zip(head) {
            *d = s as std::ffi::c_char;
        }
        Blob(info)
    })
}

/// Communicator creation with random counts, ranks, devices, configs and
/// root infos: errors, or (for `HcclCommInitAll`) communicators that work.
#[test]
fn fuzz_c_api_init() {
    let _f = Fixture::new();
    let strategy = (
        0u8..3,
        prop_oneof![4 => 0u32..4, 1 => any::<u32>()],
        rank(),
        proptest::option::of(comm_config()),
        root_blob(),
        any::<bool>(),
        proptest::collection::vec(prop_oneof![0i32..4, any::<i32>()], 4),
    );
    runner()
        .run(&strategy, |(which, n, r, cfg, root, null_out, devs)| {
            let start = Instant::now();
            let mut out = null_mut();
            let out_p: *mut HcclComm = if null_out { null_mut() } else { &mut out };
            let cfg_p = cfg
                .as_ref()
                .map_or(null(), |c| &c.0 as *const HcclCommConfig);
            let code = match which {
                0 => HcclCommInitRootInfoConfig(n, &root.0, r, cfg_p, out_p),
                1 => HcclCommInitRootInfo(n, if null_out { null() } else { &root.0 }, r, out_p),
                _ => {
                    // at most 3 devices: the array holds 4
                    let ndev = n % 4;
                    let mut devs = devs;
                    let mut comms = [null_mut(); 4];
                    let code = HcclCommInitAll(
                        ndev,
                        devs.as_mut_ptr(),
                        if null_out {
                            null_mut()
                        } else {
                            comms.as_mut_ptr()
                        },
                    );
                    if code == 0 {
                        for c in &comms[..ndev as usize] {
                            let mut size = 0;
                            prop_assert_eq!(HcclGetRankSize(*c, &mut size), 0);
                            prop_assert_eq!(size, ndev);
                            prop_assert_eq!(HcclCommDestroy(*c), 0);
                        }
                    }
                    code
                }
            };
            check_code(&format!("init {which}"), code)?;
            if which < 2 {
                // no blob names a reachable root
                prop_assert!(code != 0, "init from a bad root info succeeded");
            }
            within_limit("init", start)
        })
        .unwrap();
}
