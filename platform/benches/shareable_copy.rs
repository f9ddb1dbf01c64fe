//! Copy throughput of shareable memory (memfd, `MAP_SHARED`) against
//! private anonymous memory, 64 MiB, through the library's copy routine
//! (a stream's memcpy task), and from shareable into private memory (a
//! reader's copy out of a peer's buffer). Plain `std::time`, best of 10
//! after a warm-up.
//!
//! Run with `cargo bench -p hccl-platform --bench shareable_copy`. Also
//! prints how much of each kind the kernel backed with huge pages
//! (`/proc/self/smaps_rollup`): transparent huge pages for shared memory
//! need `shmem_enabled` other than `never`.

use hccl_platform::{DeviceMem, Stream};
use std::time::Instant;

const BYTES: usize = 64 << 20;
const REPS: usize = 10;

fn rollup(field: &str) -> String {
    std::fs::read_to_string("/proc/self/smaps_rollup")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field))
        .map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "?".into())
}

fn gbps(s: &Stream, dst: &DeviceMem, src: &DeviceMem) -> f64 {
    s.memcpy_async(dst, src).unwrap();
    s.synchronize().unwrap();
    let mut best = f64::MAX;
    for _ in 0..REPS {
        let t = Instant::now();
        s.memcpy_async(dst, src).unwrap();
        s.synchronize().unwrap();
        best = best.min(t.elapsed().as_secs_f64());
    }
    BYTES as f64 / best / 1e9
}

fn main() {
    let dev = hccl_platform::Device::new(0, Default::default());
    let s = Stream::new(&dev);
    let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/shmem_enabled")
        .unwrap_or_default();
    println!("shmem_enabled: {}", thp.trim());
    let (a, b) = (
        DeviceMem::alloc(BYTES).unwrap(),
        DeviceMem::alloc(BYTES).unwrap(),
    );
    a.fill_bytes(1).unwrap();
    b.fill_bytes(2).unwrap();
    let anon = gbps(&s, &b, &a);
    println!(
        "private anonymous: {anon:.1} GB/s (AnonHugePages {})",
        rollup("AnonHugePages")
    );
    drop((a, b));
    let (a, b) = (
        DeviceMem::alloc_shareable(BYTES).unwrap(),
        DeviceMem::alloc_shareable(BYTES).unwrap(),
    );
    a.fill_bytes(1).unwrap();
    b.fill_bytes(2).unwrap();
    let shareable = gbps(&s, &b, &a);
    println!(
        "shareable (memfd): {shareable:.1} GB/s (ShmemPmdMapped {}, FilePmdMapped {})",
        rollup("ShmemPmdMapped"),
        rollup("FilePmdMapped")
    );
    // from shareable into private memory (a reader's local buffer)
    let c = DeviceMem::alloc(BYTES).unwrap();
    c.fill_bytes(3).unwrap();
    let mixed = gbps(&s, &c, &a);
    println!("shareable -> private: {mixed:.1} GB/s");
}
