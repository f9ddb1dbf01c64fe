//! What goes over a link socket: the introduction a connecting rank sends
//! first, and the 32-byte header every frame after it starts with.
//!
//! Header (little-endian): magic `u32`, frame type `u32`, memory kind `u32`,
//! parts `u32` (a striped transfer's socket count, on its first part),
//! offset `u64` (the process id for [`Frame::Ident`]), payload length `u64`,
//! and for a transfer the receiver's ack it needs `u64` (how many of the
//! receiver's acks the sender had taken when it sent it: a transfer sent
//! before its ack arrived is held by the receiver until it has acked).

use crate::mem::MemKind;

pub(super) const MAGIC: u32 = 0x4843_434c; // "HCCL"
pub(super) const HEADER_LEN: usize = 40;
/// Largest payload of a frame that is not a transfer (a descriptor, an
/// abort reason): such frames are received whole into a staging buffer,
/// so a larger one is malformed.
pub(super) const MAX_BLOB: usize = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(super) enum Frame {
    Ack = 1,
    Signal = 2,
    Data = 3,
    Abort = 4,
    Desc = 5,
    /// Orderly close: the peer's communicator was destroyed.
    Bye = 6,
    /// The sender's process id (in the offset field), its first frame.
    Ident = 7,
}

impl Frame {
    fn from_code(code: u32) -> Option<Frame> {
        Some(match code {
            1 => Frame::Ack,
            2 => Frame::Signal,
            3 => Frame::Data,
            4 => Frame::Abort,
            5 => Frame::Desc,
            6 => Frame::Bye,
            7 => Frame::Ident,
            _ => return None,
        })
    }
}

/// A decoded frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Header {
    pub frame: Frame,
    pub kind: u32,
    pub parts: u32,
    pub off: u64,
    pub len: u64,
    pub ack: u64,
}

impl Header {
    pub fn new(frame: Frame, len: usize) -> Header {
        Header {
            frame,
            kind: 0,
            parts: 1,
            off: 0,
            len: len as u64,
            ack: 0,
        }
    }

    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        h[4..8].copy_from_slice(&(self.frame as u32).to_le_bytes());
        h[8..12].copy_from_slice(&self.kind.to_le_bytes());
        h[12..16].copy_from_slice(&self.parts.to_le_bytes());
        h[16..24].copy_from_slice(&self.off.to_le_bytes());
        h[24..32].copy_from_slice(&self.len.to_le_bytes());
        h[32..40].copy_from_slice(&self.ack.to_le_bytes());
        h
    }

    /// The header in `b`, or what is wrong with it.
    pub fn decode(b: &[u8; HEADER_LEN]) -> Result<Header, String> {
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        if u32_at(0) != MAGIC {
            return Err("malformed frame (bad magic)".into());
        }
        let frame = Frame::from_code(u32_at(4))
            .ok_or_else(|| format!("malformed frame (type {})", u32_at(4)))?;
        let h = Header {
            frame,
            kind: u32_at(8),
            parts: u32_at(12),
            off: u64_at(16),
            len: u64_at(24),
            ack: u64_at(32),
        };
        match frame {
            Frame::Desc | Frame::Abort if h.len > MAX_BLOB as u64 => Err(format!(
                "malformed frame ({frame:?} of {} bytes, at most {MAX_BLOB})",
                h.len
            )),
            _ => Ok(h),
        }
    }
}

pub(super) fn kind_code(k: MemKind) -> u32 {
    k.index() as u32
}

pub(super) fn kind_from(code: u32) -> Option<MemKind> {
    MemKind::ALL.get(code as usize).copied()
}

/// The introduction a connecting rank sends on each socket of a link:
/// magic, the group's unique id, its rank, the rank it connects to, and
/// which of how many sockets of the link this one is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Hello {
    pub unique_id: [u8; 16],
    pub from: u32,
    pub to: u32,
    pub index: u16,
    pub count: u16,
}

impl Hello {
    pub const LEN: usize = 4 + 16 + 4 + 4 + 2 + 2;

    pub fn encode(&self) -> [u8; Hello::LEN] {
        let mut b = [0u8; Hello::LEN];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..20].copy_from_slice(&self.unique_id);
        b[20..24].copy_from_slice(&self.from.to_le_bytes());
        b[24..28].copy_from_slice(&self.to.to_le_bytes());
        b[28..30].copy_from_slice(&self.index.to_le_bytes());
        b[30..32].copy_from_slice(&self.count.to_le_bytes());
        b
    }

    /// The introduction in `b`, if it is one (right magic, sane socket
    /// index); whether it is for this group and rank is the caller's check.
    pub fn decode(b: &[u8; Hello::LEN]) -> Option<Hello> {
        if b[0..4] != MAGIC.to_le_bytes() {
            return None;
        }
        let h = Hello {
            unique_id: b[4..20].try_into().expect("16 bytes"),
            from: u32::from_le_bytes(b[20..24].try_into().expect("4 bytes")),
            to: u32::from_le_bytes(b[24..28].try_into().expect("4 bytes")),
            index: u16::from_le_bytes(b[28..30].try_into().expect("2 bytes")),
            count: u16::from_le_bytes(b[30..32].try_into().expect("2 bytes")),
        };
        (h.count >= 1 && h.count <= super::MAX_SOCKETS as u16 && h.index < h.count).then_some(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_and_hellos_round_trip_and_bad_ones_are_refused() {
        let h = Header {
            frame: Frame::Data,
            kind: 3,
            parts: 2,
            off: 1 << 40,
            len: 12345,
            ack: 7,
        };
        assert_eq!(Header::decode(&h.encode()), Ok(h));
        let mut bad = h.encode();
        bad[0] ^= 1;
        assert_eq!(
            Header::decode(&bad).unwrap_err(),
            "malformed frame (bad magic)"
        );
        let mut bad = h.encode();
        bad[4] = 99;
        assert!(Header::decode(&bad).unwrap_err().contains("type 99"));
        let big = Header::new(Frame::Desc, MAX_BLOB + 1).encode();
        assert!(Header::decode(&big).unwrap_err().contains("at most 4096"));

        let hello = Hello {
            unique_id: [5; 16],
            from: 1,
            to: 4,
            index: 1,
            count: 2,
        };
        assert_eq!(Hello::decode(&hello.encode()), Some(hello));
        let wrong_index = Hello { index: 2, ..hello };
        assert_eq!(Hello::decode(&wrong_index.encode()), None);
        let mut junk = [b'G'; Hello::LEN];
        junk[..4].copy_from_slice(b"GET ");
        assert_eq!(Hello::decode(&junk), None);
    }
}
