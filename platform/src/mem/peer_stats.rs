//! How this process reached its peers' user buffers: through mappings of
//! their registered memory (loads and stores) or with cross-memory attach
//! (a `process_vm_readv` per transfer). Counted per process, for tests
//! and tools that must know which path ops took.

use crate::sync::{process, Ordering};

static MAPPED_READS: process::AtomicU64 = process::AtomicU64::new(0);
static MAPPED_READ_BYTES: process::AtomicU64 = process::AtomicU64::new(0);
static MAPPED_WRITES: process::AtomicU64 = process::AtomicU64::new(0);
static MAPPED_WRITE_BYTES: process::AtomicU64 = process::AtomicU64::new(0);
static CMA_READS: process::AtomicU64 = process::AtomicU64::new(0);
static CMA_READ_BYTES: process::AtomicU64 = process::AtomicU64::new(0);

/// Reads and writes of peers' user buffers by this process since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeerAccessStats {
    /// Reads (and fused read-reduces) straight out of a mapped peer buffer.
    pub mapped_reads: u64,
    /// Bytes of those.
    pub mapped_read_bytes: u64,
    /// Transfers written straight into a mapped peer user buffer.
    pub mapped_writes: u64,
    /// Bytes of those.
    pub mapped_write_bytes: u64,
    /// Reads with cross-memory attach (`process_vm_readv`).
    pub cma_reads: u64,
    /// Bytes of those.
    pub cma_read_bytes: u64,
}

/// The counts so far.
pub fn peer_access_stats() -> PeerAccessStats {
    let l = |c: &process::AtomicU64| c.load(Ordering::Relaxed);
    PeerAccessStats {
        mapped_reads: l(&MAPPED_READS),
        mapped_read_bytes: l(&MAPPED_READ_BYTES),
        mapped_writes: l(&MAPPED_WRITES),
        mapped_write_bytes: l(&MAPPED_WRITE_BYTES),
        cma_reads: l(&CMA_READS),
        cma_read_bytes: l(&CMA_READ_BYTES),
    }
}

fn add(n: &process::AtomicU64, bytes: &process::AtomicU64, b: usize) {
    n.fetch_add(1, Ordering::Relaxed);
    bytes.fetch_add(b as u64, Ordering::Relaxed);
}

/// Counts a read of `bytes` from a mapped peer buffer.
pub(crate) fn mapped_read(bytes: usize) {
    add(&MAPPED_READS, &MAPPED_READ_BYTES, bytes);
}

/// Counts a write of `bytes` into a mapped peer user buffer.
pub(crate) fn mapped_write(bytes: usize) {
    add(&MAPPED_WRITES, &MAPPED_WRITE_BYTES, bytes);
}

/// Counts a cross-memory-attach read of `bytes`.
pub(crate) fn cma_read(bytes: usize) {
    add(&CMA_READS, &CMA_READ_BYTES, bytes);
}
