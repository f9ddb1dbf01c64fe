//! The op descriptor ranks exchange at the start of every op, so that ranks
//! that issued different collectives, counts or types are told so instead
//! of hanging (HCCL's consistency check). The same message also carries,
//! for executors that read their peers' user buffers, where those buffers
//! are ([`ParamMem`]); that part is never compared.

use super::LinkOpState;
use crate::error::HcclError;
use crate::mem::MemHandle;
use crate::sync::{AtomicBool, AtomicU64, Mutex, Ordering};
use std::collections::VecDeque;

/// How HCCL's inconsistency error begins.
const INCONSISTENT: &str =
    "The arguments for collective communication are inconsistent between ranks";

/// Whether `e` is HCCL's inconsistency error (a parameter of the op differs
/// between this rank and a peer), as [`OpDesc::check`] makes it.
pub(crate) fn is_inconsistency(e: &HcclError) -> bool {
    e.code() == crate::HcclResult::EPara && e.to_string().contains(INCONSISTENT)
}

/// What an op looks like from one rank; two ranks running the same op
/// must have equal descriptors.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpDesc {
    /// Op kind code.
    pub op: u32,
    /// Element type code.
    pub dtype: u32,
    /// Reduction code.
    pub reduce: u32,
    /// Root rank.
    pub root: u32,
    /// Element count; for the V ops whose per-rank counts every rank
    /// passes whole (AllGatherV, ReduceScatterV), their
    /// [`OpDesc::counts_digest`] instead.
    pub count: u64,
    /// CCL buffer size, bytes.
    pub buffer: u64,
    /// Hash of the op tag.
    pub tag: u64,
    /// Where the sender's user buffers of this op are (zero when the sender
    /// does not expose them); not part of the comparison.
    pub mem: ParamMem,
}

/// Where a rank's user buffers of the current op are: in its own address
/// space (what a peer on the same host needs to read them with
/// cross-memory attach) and, for buffers registered with the op's
/// communicator, the handles a peer maps them by (then it reads and
/// writes them with loads and stores instead).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ParamMem {
    /// Address of the op's input buffer.
    pub input_addr: u64,
    /// Bytes of the input buffer.
    pub input_len: u64,
    /// Address of the op's output buffer.
    pub output_addr: u64,
    /// Bytes of the output buffer.
    pub output_len: u64,
    /// The input buffer's handle, when it is registered shareable memory.
    pub input_handle: Option<MemHandle>,
    /// The output buffer's handle, when it is registered shareable memory.
    pub output_handle: Option<MemHandle>,
}

/// FNV-1a (64-bit) of `bytes`: the descriptor's hashes, the same on every
/// rank and machine.
fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// Marks a [`OpDesc::count`] that is a digest of per-rank counts rather
/// than a count (no real count comes near 2^63 elements).
const DIGEST_BIT: u64 = 1 << 63;

impl OpDesc {
    /// What a V op whose every rank passes all ranks' counts (AllGatherV's
    /// recvCounts, ReduceScatterV's sendCounts) puts in
    /// [`OpDesc::count`]: a digest of those counts, so ranks that disagree
    /// about any rank's count are told so before any data moves (and
    /// executors may size their slots by the longest count, which every
    /// rank then knows alike).
    pub fn counts_digest(counts: &[u64]) -> u64 {
        fnv1a(counts.iter().flat_map(|c| c.to_le_bytes())) | DIGEST_BIT
    }

    /// What an op's tag puts in [`OpDesc::tag`].
    pub fn tag_hash(tag: &str) -> u64 {
        fnv1a(tag.bytes())
    }

    /// The fields as (HCCL's parameter name, value), in comparison order.
    fn fields(&self) -> [(&'static str, u64); 7] {
        [
            ("op type", self.op as u64),
            ("tag", self.tag),
            ("count", self.count),
            ("dataType", self.dtype as u64),
            ("op", self.reduce as u64),
            ("root", self.root as u64),
            ("buffer size", self.buffer),
        ]
    }

    /// `Ok` if `remote` matches this (local) descriptor; otherwise HCCL's
    /// inconsistency error naming the first differing parameter.
    pub fn check(&self, remote: &OpDesc, peer: u32) -> Result<(), HcclError> {
        for ((name, local), (_, theirs)) in self.fields().into_iter().zip(remote.fields()) {
            if local != theirs {
                let digest = name == "count" && (local | theirs) & DIGEST_BIT != 0;
                return Err(if digest {
                    HcclError::para(format!(
                        "{INCONSISTENT}: parameter counts (every rank's count, which all \
                         ranks must pass alike), digest at the local end {local:#018x}, at \
                         the remote end {theirs:#018x}"
                    ))
                } else {
                    HcclError::para(format!(
                        "{INCONSISTENT}: parameter {name}, local end {local}, remote end {theirs}"
                    ))
                }
                .peer(peer));
            }
        }
        Ok(())
    }

    /// Bytes of the wire form: the compared fields (40 bytes, the prefix
    /// the AIV boards carry), the addresses and lengths (32), then the two
    /// handles ([`MemHandle::WIRE`] each, all zero for none).
    pub const WIRE: usize = 72 + 2 * MemHandle::WIRE;

    /// Wire form (little-endian, [`OpDesc::WIRE`] bytes).
    pub fn to_bytes(&self) -> [u8; OpDesc::WIRE] {
        let mut b = [0u8; OpDesc::WIRE];
        b[0..4].copy_from_slice(&self.op.to_le_bytes());
        b[4..8].copy_from_slice(&self.dtype.to_le_bytes());
        b[8..12].copy_from_slice(&self.reduce.to_le_bytes());
        b[12..16].copy_from_slice(&self.root.to_le_bytes());
        b[16..24].copy_from_slice(&self.count.to_le_bytes());
        b[24..32].copy_from_slice(&self.buffer.to_le_bytes());
        b[32..40].copy_from_slice(&self.tag.to_le_bytes());
        let m = &self.mem;
        for (i, v) in [m.input_addr, m.input_len, m.output_addr, m.output_len]
            .into_iter()
            .enumerate()
        {
            b[40 + 8 * i..48 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        const H: usize = MemHandle::WIRE;
        for (i, h) in [m.input_handle, m.output_handle].into_iter().enumerate() {
            if let Some(h) = h {
                b[72 + H * i..72 + H * (i + 1)].copy_from_slice(&h.to_bytes());
            }
        }
        b
    }

    /// From the wire form.
    pub fn from_bytes(b: &[u8; OpDesc::WIRE]) -> OpDesc {
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        let handle_at = |o: usize| {
            MemHandle::from_bytes(b[o..o + MemHandle::WIRE].try_into().expect("a handle"))
        };
        OpDesc {
            op: u32_at(0),
            dtype: u32_at(4),
            reduce: u32_at(8),
            root: u32_at(12),
            count: u64_at(16),
            buffer: u64_at(24),
            tag: u64_at(32),
            mem: ParamMem {
                input_addr: u64_at(40),
                input_len: u64_at(48),
                output_addr: u64_at(56),
                output_len: u64_at(64),
                input_handle: handle_at(72),
                output_handle: handle_at(72 + MemHandle::WIRE),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_first_difference_like_hccl() {
        let a = OpDesc {
            count: 16512,
            ..Default::default()
        };
        let b = OpDesc {
            count: 8320,
            ..Default::default()
        };
        let e = a.check(&b, 1).unwrap_err();
        assert_eq!(
            e.to_string(),
            "parameter error: The arguments for collective communication are inconsistent between ranks: parameter count, local end 16512, remote end 8320 [peer rank 1]"
        );
        assert!(a.check(&a, 1).is_ok());
        assert_eq!(OpDesc::from_bytes(&b.to_bytes()), b);
        // where the buffers are differs between ranks and is not compared
        let c = OpDesc {
            count: 16512,
            mem: ParamMem {
                input_addr: 0x7f00_0000_1000,
                input_len: 64,
                output_addr: 0x7f00_0000_2000,
                output_len: 128,
                input_handle: None,
                output_handle: Some(MemHandle {
                    pid: 4321,
                    fd: 17,
                    inode: 99_001,
                    region_len: 1 << 20,
                    offset: 4096,
                    len: 128,
                }),
            },
            ..Default::default()
        };
        assert!(a.check(&c, 1).is_ok());
        assert_eq!(OpDesc::from_bytes(&c.to_bytes()), c);
        // the compared prefix the AIV boards carry is unchanged by the rest
        assert_eq!(c.to_bytes()[..40], a.to_bytes()[..40]);
    }

    #[test]
    fn per_rank_counts_are_compared_by_digest_and_named_as_counts() {
        let d = OpDesc::counts_digest;
        // any rank's count, and the order, changes the digest
        assert_ne!(d(&[4, 4, 4]), d(&[4, 4, 5]));
        assert_ne!(d(&[1, 2]), d(&[2, 1]));
        assert_ne!(d(&[4]), d(&[4, 0]));
        assert_eq!(d(&[7, 0, 3]), d(&[7, 0, 3]));
        // the tags' hash is FNV-1a 64 (its published value for "a")
        assert_eq!(OpDesc::tag_hash("a"), 0xaf63_dc4c_8601_ec8c);
        let a = OpDesc {
            count: d(&[4, 4, 4]),
            ..Default::default()
        };
        let b = OpDesc {
            count: d(&[4, 4, 5]),
            ..Default::default()
        };
        assert!(a.check(&a, 2).is_ok());
        let e = a.check(&b, 2).unwrap_err();
        assert!(is_inconsistency(&e), "{e}");
        let msg = e.to_string();
        assert!(
            msg.contains("parameter counts (every rank's count"),
            "{msg}"
        );
        assert!(msg.contains(&format!("{:#018x}", a.count)), "{msg}");
        assert!(msg.ends_with("[peer rank 2]"), "{msg}");
        assert_eq!(OpDesc::from_bytes(&b.to_bytes()), b);
    }
}

/// The consistency check of a transport whose peer's descriptors arrive
/// as messages (TCP, ibverbs), deferred: `RxDesc` checks the peer's
/// descriptor if it is here, else leaves the check to the link's next
/// wait, so waiting for it never holds back this op's first ack (the
/// peer's descriptor precedes its ack and data on the connection, so that
/// wait finds it). The peer's descriptors are the transport's: a queue
/// and a count of those that arrived.
#[derive(Debug, Default)]
pub(crate) struct DeferredChecks {
    taken: AtomicU64,
    /// This rank's descriptors whose peer's has not arrived yet
    /// (sequence number, descriptor).
    unchecked: Mutex<VecDeque<(u64, OpDesc)>>,
    has_unchecked: AtomicBool,
}

impl DeferredChecks {
    /// `RxDesc` of `mine`: numbers it at the first poll, then checks what
    /// can be checked.
    pub(crate) fn rx_desc(
        &self,
        mine: &OpDesc,
        state: &mut LinkOpState,
        arrived: &AtomicU64,
        theirs: &Mutex<VecDeque<OpDesc>>,
        (local, peer): (u32, u32),
    ) -> Result<(), HcclError> {
        if state.seq.is_none() {
            let seq = self.taken.fetch_add(1, Ordering::Relaxed) + 1;
            state.seq = Some(seq);
            self.unchecked
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push_back((seq, *mine));
            self.has_unchecked.store(true, Ordering::Release);
        }
        self.check(arrived, theirs, (local, peer))
    }

    /// Checks the deferred descriptors whose peer's descriptor has come
    /// (`arrived` counts them, `theirs` holds them in order).
    pub(crate) fn check(
        &self,
        arrived: &AtomicU64,
        theirs: &Mutex<VecDeque<OpDesc>>,
        (local, peer): (u32, u32),
    ) -> Result<(), HcclError> {
        if !self.has_unchecked.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut pending = self.unchecked.lock().unwrap_or_else(|p| p.into_inner());
        while let Some((seq, mine)) = pending.front() {
            if arrived.load(Ordering::Acquire) < *seq {
                break;
            }
            let t = theirs.lock().unwrap_or_else(|p| p.into_inner()).pop_front();
            let r = match t {
                Some(t) => mine.check(&t, peer).map_err(|e| e.rank(local)),
                None => Err(HcclError::internal("descriptor signalled but missing")),
            };
            pending.pop_front();
            r?;
        }
        self.has_unchecked
            .store(!pending.is_empty(), Ordering::Release);
        Ok(())
    }
}
