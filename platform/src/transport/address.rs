//! One rank's address: every component's bytes, packed by component id
//! as UCC's `ucc_context_pack_addr` packs them:
//!
//! ```text
//! | n: u16 | { id: u32, offset: u32, len: u32 } * n | blobs |
//! ```
//!
//! little-endian, offsets from the start of the blob area. Ids are a hash
//! of the component's name ([`component_id`]), so processes that
//! registered their components in different orders still agree.

use crate::error::{HcclError, Result};

/// Most components one address may carry.
pub const MAX_COMPONENTS: usize = 64;
/// Most bytes one component's address may take.
pub const MAX_BLOB: usize = 64 * 1024;

/// The id a component's address is packed under: FNV-1a of its name.
pub fn component_id(name: &str) -> u32 {
    name.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// Packs `(id, bytes)` pairs into one address.
pub fn pack_addresses(parts: &[(u32, Vec<u8>)]) -> Result<Vec<u8>> {
    if parts.len() > MAX_COMPONENTS {
        return Err(HcclError::para(format!(
            "{} transport addresses to pack; at most {MAX_COMPONENTS}",
            parts.len()
        )));
    }
    let mut out = Vec::new();
    out.extend_from_slice(&(parts.len() as u16).to_le_bytes());
    let mut offset = 0usize;
    for (id, blob) in parts {
        if blob.len() > MAX_BLOB {
            return Err(HcclError::para(format!(
                "transport address of {} bytes (component id {id:#x}); at most {MAX_BLOB}",
                blob.len()
            )));
        }
        out.extend_from_slice(&id.to_le_bytes());
        out.extend_from_slice(&(offset as u32).to_le_bytes());
        out.extend_from_slice(&(blob.len() as u32).to_le_bytes());
        offset += blob.len();
    }
    for (_, blob) in parts {
        out.extend_from_slice(blob);
    }
    Ok(out)
}

/// The `(id, bytes)` pairs of a packed address, checked: an address that
/// arrived from another process is untrusted.
pub fn unpack_addresses(bytes: &[u8]) -> Result<Vec<(u32, &[u8])>> {
    let bad = |why: &str| HcclError::para(format!("malformed transport address: {why}"));
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    let n = u16::from_le_bytes(
        bytes
            .get(..2)
            .ok_or_else(|| bad("shorter than its count"))?
            .try_into()
            .expect("two bytes"),
    ) as usize;
    if n > MAX_COMPONENTS {
        return Err(bad(&format!("{n} components; at most {MAX_COMPONENTS}")));
    }
    let table_end = 2 + n * 12;
    let table = bytes
        .get(2..table_end)
        .ok_or_else(|| bad("shorter than its table"))?;
    let blobs = &bytes[table_end..];
    let word = |at: usize| u32::from_le_bytes(table[at..at + 4].try_into().expect("four bytes"));
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let (id, off, len) = (word(i * 12), word(i * 12 + 4), word(i * 12 + 8));
        let (off, len) = (off as usize, len as usize);
        if len > MAX_BLOB {
            return Err(bad(&format!("component {id:#x} claims {len} bytes")));
        }
        let blob = off
            .checked_add(len)
            .and_then(|end| blobs.get(off..end))
            .ok_or_else(|| bad(&format!("component {id:#x} runs past the end")))?;
        if out.iter().any(|(seen, _)| *seen == id) {
            return Err(bad(&format!("component {id:#x} appears twice")));
        }
        out.push((id, blob));
    }
    Ok(out)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ids_differ_for_the_builtins() {
        let ids: Vec<u32> = ["in-process", "shm", "tcp", "ibverbs"]
            .iter()
            .map(|n| component_id(n))
            .collect();
        for (i, a) in ids.iter().enumerate() {
            for b in &ids[i + 1..] {
                assert_ne!(a, b);
            }
        }
        // FNV-1a's published value for "a"
        assert_eq!(component_id("a"), 0xe40c_292c);
    }

    #[test]
    fn packs_and_unpacks() {
        let parts = vec![
            (component_id("shm"), b"/hccl-rs-r0".to_vec()),
            (component_id("tcp"), Vec::new()),
            (component_id("ibverbs"), vec![7u8; 300]),
        ];
        let packed = pack_addresses(&parts).unwrap();
        assert_eq!(packed.len(), 2 + 3 * 12 + 11 + 300);
        let back = unpack_addresses(&packed).unwrap();
        assert_eq!(back.len(), 3);
        for ((id, blob), (id2, blob2)) in parts.iter().zip(&back) {
            assert_eq!(id, id2);
            assert_eq!(blob.as_slice(), *blob2);
        }
        assert!(unpack_addresses(&[]).unwrap().is_empty());
    }

    #[test]
    fn refuses_malformed_addresses_by_name() {
        let packed = pack_addresses(&[(1, vec![1, 2, 3])]).unwrap();
        let e = unpack_addresses(&packed[..packed.len() - 1]).unwrap_err();
        assert!(e.message().contains("runs past the end"), "{e}");
        let e = unpack_addresses(&[5]).unwrap_err();
        assert!(e.message().contains("shorter than its count"), "{e}");
        let e = unpack_addresses(&[1, 0, 1]).unwrap_err();
        assert!(e.message().contains("shorter than its table"), "{e}");
        let twice = pack_addresses(&[(9, vec![]), (9, vec![])]).unwrap();
        let e = unpack_addresses(&twice).unwrap_err();
        assert!(e.message().contains("appears twice"), "{e}");
        let e = pack_addresses(&[(1, vec![0; MAX_BLOB + 1])]).unwrap_err();
        assert_eq!(e.code(), crate::HcclResult::EPara);
    }

    proptest! {
        /// Whatever arrives, unpacking returns an error or blobs inside
        /// the input, never a panic.
        #[test]
        fn fuzz_unpack_addresses(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(parts) = unpack_addresses(&bytes) {
                for (_, blob) in parts {
                    prop_assert!(blob.len() <= bytes.len());
                }
            }
        }

        #[test]
        fn fuzz_pack_round_trip(parts in proptest::collection::vec(
            (any::<u32>(), proptest::collection::vec(any::<u8>(), 0..40)), 0..8)) {
            let mut seen = std::collections::HashSet::new();
            let parts: Vec<_> = parts.into_iter().filter(|(id, _)| seen.insert(*id)).collect();
            let packed = pack_addresses(&parts).unwrap();
            let back = unpack_addresses(&packed).unwrap();
            prop_assert_eq!(back.len(), parts.len());
            for ((id, blob), (id2, blob2)) in parts.iter().zip(back) {
                prop_assert_eq!(*id, id2);
                prop_assert_eq!(blob.as_slice(), blob2);
            }
        }
    }
}
