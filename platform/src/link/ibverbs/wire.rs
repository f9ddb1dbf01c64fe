//! What crosses the wire besides data: the immediate values that say
//! what a write-with-immediate was, and the handshake that connects two
//! queue pairs (sent over a TCP socket, as perftest and NCCL do).

use crate::error::{HcclError, Result};

/// What a write-with-immediate announces (the immediate's top 4 bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ImmKind {
    /// A transfer into the receiver's buffer completed (`TxAsync`).
    Done = 1,
    /// "You may write into my buffers" (`TxAck`).
    Ack = 2,
    /// The secondary signal (`TxDataSignal`).
    Signal = 3,
    /// An op descriptor was written into the receiver's mailbox slot.
    Desc = 4,
    /// The sender failed; the reason is in the mailbox slot (payload:
    /// its length).
    Abort = 5,
    /// The sender's communicator is going away in order.
    Bye = 6,
}

/// The immediate value for `kind` with a 28-bit `payload`.
pub(crate) fn imm(kind: ImmKind, payload: u32) -> u32 {
    ((kind as u32) << 28) | (payload & 0x0fff_ffff)
}

/// An immediate value's kind and payload; `None` for a kind this
/// version does not know (a peer of another version: refused).
pub(crate) fn parse_imm(v: u32) -> Option<(ImmKind, u32)> {
    let kind = match v >> 28 {
        1 => ImmKind::Done,
        2 => ImmKind::Ack,
        3 => ImmKind::Signal,
        4 => ImmKind::Desc,
        5 => ImmKind::Abort,
        6 => ImmKind::Bye,
        _ => return None,
    };
    Some((kind, v & 0x0fff_ffff))
}

/// A buffer the peer may write: its address, key and length.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RemoteBuf {
    pub addr: u64,
    pub rkey: u32,
    pub len: u64,
}

/// One end's half of the handshake: its queue pair and what the peer may
/// write into.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Hello {
    pub unique_id: [u8; 16],
    pub from: u32,
    pub to: u32,
    pub pid: u32,
    pub qpn: u32,
    pub psn: u32,
    pub lid: u16,
    /// `IBV_LINK_LAYER_*` of the port.
    pub link_layer: u8,
    /// The port's active MTU (`IBV_MTU_*`).
    pub mtu: u8,
    pub gid: [u8; 16],
    /// Receives posted for the peer at the start (its first credits).
    pub recv_depth: u32,
    /// The mailbox: credit word, then `recv_depth` slots.
    pub mailbox: RemoteBuf,
    pub ccl_input: RemoteBuf,
    pub ccl_output: RemoteBuf,
    /// The device, for messages.
    pub device: String,
}

const MAGIC: u32 = 0x5642_4948; // "HIBV"
const VERSION: u16 = 1;
const DEVICE_BYTES: usize = 32;

impl Hello {
    /// Bytes on the wire.
    pub const LEN: usize = 4 + 2 + 16 + 4 * 5 + 2 + 1 + 1 + 16 + 4 + 3 * 20 + DEVICE_BYTES;

    /// The wire form.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        let mut at = 0;
        let mut put = |bytes: &[u8]| {
            b[at..at + bytes.len()].copy_from_slice(bytes);
            at += bytes.len();
        };
        put(&MAGIC.to_le_bytes());
        put(&VERSION.to_le_bytes());
        put(&self.unique_id);
        for v in [self.from, self.to, self.pid, self.qpn, self.psn] {
            put(&v.to_le_bytes());
        }
        put(&self.lid.to_le_bytes());
        put(&[self.link_layer, self.mtu]);
        put(&self.gid);
        put(&self.recv_depth.to_le_bytes());
        for r in [self.mailbox, self.ccl_input, self.ccl_output] {
            put(&r.addr.to_le_bytes());
            put(&r.rkey.to_le_bytes());
            put(&r.len.to_le_bytes());
        }
        let mut name = [0u8; DEVICE_BYTES];
        let n = self.device.len().min(DEVICE_BYTES);
        name[..n].copy_from_slice(&self.device.as_bytes()[..n]);
        put(&name);
        b
    }

    /// Parses and checks a peer's half (untrusted bytes).
    pub fn decode(b: &[u8]) -> Result<Hello> {
        let bad = |why: &str| HcclError::roce_connect(format!("bad ibverbs handshake: {why}"));
        if b.len() != Self::LEN {
            return Err(bad(&format!("{} bytes, expected {}", b.len(), Self::LEN)));
        }
        let mut at = 0;
        let mut take = |n: usize| {
            let s = &b[at..at + n];
            at += n;
            s
        };
        let u16_ = |s: &[u8]| u16::from_le_bytes(s.try_into().expect("2"));
        let u32_ = |s: &[u8]| u32::from_le_bytes(s.try_into().expect("4"));
        let u64_ = |s: &[u8]| u64::from_le_bytes(s.try_into().expect("8"));
        if u32_(take(4)) != MAGIC {
            return Err(bad("not an hccl-rs ibverbs peer"));
        }
        let version = u16_(take(2));
        if version != VERSION {
            return Err(bad(&format!(
                "version {version}, this side speaks {VERSION}"
            )));
        }
        let mut h = Hello {
            unique_id: take(16).try_into().expect("16"),
            ..Default::default()
        };
        h.from = u32_(take(4));
        h.to = u32_(take(4));
        h.pid = u32_(take(4));
        h.qpn = u32_(take(4));
        h.psn = u32_(take(4)) & 0x00ff_ffff;
        h.lid = u16_(take(2));
        let lm = take(2);
        (h.link_layer, h.mtu) = (lm[0], lm[1]);
        h.gid = take(16).try_into().expect("16");
        h.recv_depth = u32_(take(4));
        let mut bufs = [RemoteBuf::default(); 3];
        for r in bufs.iter_mut() {
            r.addr = u64_(take(8));
            r.rkey = u32_(take(4));
            r.len = u64_(take(8));
        }
        [h.mailbox, h.ccl_input, h.ccl_output] = bufs;
        let name = take(DEVICE_BYTES);
        let end = name.iter().position(|&c| c == 0).unwrap_or(DEVICE_BYTES);
        h.device = String::from_utf8_lossy(&name[..end]).into_owned();
        if !(1..=5).contains(&h.mtu) {
            return Err(bad(&format!("MTU code {}", h.mtu)));
        }
        if h.recv_depth == 0 || h.recv_depth > 1 << 16 {
            return Err(bad(&format!("receive depth {}", h.recv_depth)));
        }
        Ok(h)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn immediates_round_trip() {
        for kind in [
            ImmKind::Done,
            ImmKind::Ack,
            ImmKind::Signal,
            ImmKind::Desc,
            ImmKind::Abort,
            ImmKind::Bye,
        ] {
            assert_eq!(parse_imm(imm(kind, 77)), Some((kind, 77)));
        }
        assert_eq!(
            parse_imm(imm(ImmKind::Abort, u32::MAX)).unwrap().1,
            0x0fff_ffff
        );
        assert_eq!(parse_imm(0), None);
        assert_eq!(parse_imm(0xf000_0000), None);
    }

    fn hello() -> Hello {
        Hello {
            unique_id: [9; 16],
            from: 1,
            to: 2,
            pid: 4242,
            qpn: 0x11,
            psn: 0x123456,
            lid: 0,
            link_layer: 2,
            mtu: 5,
            gid: [0xfe; 16],
            recv_depth: 64,
            mailbox: RemoteBuf {
                addr: 0x1000,
                rkey: 7,
                len: 64 * 256 + 128,
            },
            ccl_input: RemoteBuf {
                addr: 0x2000,
                rkey: 8,
                len: 1 << 20,
            },
            ccl_output: RemoteBuf {
                addr: 0x3000,
                rkey: 9,
                len: 1 << 20,
            },
            device: "rxe0".into(),
        }
    }

    #[test]
    fn hello_round_trips_and_refuses_strangers() {
        let h = hello();
        assert_eq!(Hello::decode(&h.encode()).unwrap(), h);
        let mut b = h.encode();
        b[0] ^= 1;
        let e = Hello::decode(&b).unwrap_err();
        assert!(e.message().contains("not an hccl-rs ibverbs peer"), "{e}");
        assert_eq!(e.code(), crate::HcclResult::ERoceConnect);
        let e = Hello::decode(&h.encode()[1..]).unwrap_err();
        assert!(e.message().contains("expected"), "{e}");
        let mut h2 = h.clone();
        h2.mtu = 9;
        assert!(Hello::decode(&h2.encode()).is_err());
    }

    proptest! {
        #[test]
        fn fuzz_ibverbs_hello(bytes in proptest::collection::vec(any::<u8>(), Hello::LEN..=Hello::LEN)) {
            let _ = Hello::decode(&bytes);
        }
    }
}
