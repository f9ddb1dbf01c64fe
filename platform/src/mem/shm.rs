//! POSIX shared-memory segments (`/dev/shm`), mapped with memmap2.

use crate::error::{HcclError, Result};
use crate::sync::{process, Ordering};
use rustix::fs::Mode;
use rustix::shm;
use std::fs::File;

/// Prefix of every segment name hccl-rs creates, so leftovers are easy to find.
pub const SHM_PREFIX: &str = "/hccl-rs-";

/// A fresh segment name unique to this process: `/hccl-rs-<pid>-<seq>-<label>`.
pub fn shm_segment_name(label: &str) -> String {
    static SEQ: process::AtomicU64 = process::AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    format!(
        "{SHM_PREFIX}{}-{seq}-{label}",
        rustix::process::getpid().as_raw_nonzero()
    )
}

/// A mapped segment. The creator unlinks the name when dropped, so the
/// segment disappears once every mapping is gone.
pub(crate) struct ShmSegment {
    name: String,
    map: memmap2::MmapMut,
    owner: bool,
}

impl ShmSegment {
    pub(crate) fn create(name: &str, len: usize) -> Result<ShmSegment> {
        if len == 0 {
            return Err(HcclError::para(format!(
                "shared segment '{name}' must have a non-zero length"
            )));
        }
        let fd = shm::open(
            name,
            shm::OFlags::CREATE | shm::OFlags::EXCL | shm::OFlags::RDWR,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| HcclError::syscall(format!("shm_open(create) '{name}': {e}")))?;
        let file = File::from(fd);
        let seg = (|| {
            file.set_len(len as u64).map_err(|e| {
                HcclError::memory(format!(
                    "sizing shared segment '{name}' to {len} bytes: {e}"
                ))
            })?;
            Self::map(name, &file, true)
        })();
        if seg.is_err() {
            let _ = shm::unlink(name);
        }
        seg
    }

    pub(crate) fn open(name: &str) -> Result<ShmSegment> {
        let fd = shm::open(name, shm::OFlags::RDWR, Mode::empty())
            .map_err(|e| HcclError::not_found(format!("shm_open '{name}': {e}")))?;
        let file = File::from(fd);
        Self::map(name, &file, false)
    }

    fn map(name: &str, file: &File, owner: bool) -> Result<ShmSegment> {
        // SAFETY: the mapping is shared with other processes by design; we
        // never hand out Rust references into it that assume exclusivity —
        // only raw pointers used under the algorithms' disjointness protocol.
        let map = unsafe { memmap2::MmapMut::map_mut(file) }
            .map_err(|e| HcclError::syscall(format!("mmap of shared segment '{name}': {e}")))?;
        Ok(ShmSegment {
            name: name.to_owned(),
            map,
            owner,
        })
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.map.as_mut_ptr()
    }
}

impl Drop for ShmSegment {
    fn drop(&mut self) {
        if self.owner {
            // The name may already be gone: owners unlink early on purpose.
            match shm::unlink(self.name.as_str()) {
                Ok(()) | Err(rustix::io::Errno::NOENT) => {}
                Err(e) => {
                    tracing::warn!(segment = %self.name, error = %e, "could not unlink shared segment")
                }
            }
        }
    }
}
