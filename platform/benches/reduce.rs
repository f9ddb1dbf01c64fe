//! Reduce-kernel throughput vs memcpy (plain `std::time`, no harness).
//!
//! Run with `cargo bench -p hccl-platform --bench reduce`. For each buffer
//! size it reports GB/s of `dst` bytes produced per second (best of 5
//! repetitions) and the ratio to `copy_from_slice` of the same size.

use hccl_platform::reduce_in_place;
use hccl_platform::{DataType, ReduceOp};
use std::hint::black_box;
use std::time::{Duration, Instant};

const REPS: usize = 5;
/// Bytes processed per repetition (small buffers are looped over).
const MIN_BYTES_PER_REP: usize = 256 << 20;

/// A heap buffer of `len` bytes starting at a 64-byte boundary plus `mis`.
struct Buf {
    raw: Vec<u8>,
    off: usize,
    len: usize,
}

impl Buf {
    fn new(len: usize, mis: usize) -> Buf {
        let raw = vec![0u8; len + 128];
        let off = (64 - raw.as_ptr() as usize % 64) % 64 + mis;
        Buf { raw, off, len }
    }
    fn bytes(&self) -> &[u8] {
        &self.raw[self.off..self.off + self.len]
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.raw[self.off..self.off + self.len]
    }
}

/// Fills `buf` with moderate, finite values of `dtype` (no NaN, no
/// subnormals), varying with `seed`.
fn fill(buf: &mut [u8], dtype: DataType, seed: u32) {
    let size = dtype.size();
    for (i, e) in buf.chunks_exact_mut(size).enumerate() {
        let k = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 20; // 0..4096
        let x = 1.0 + k as f32 / 4096.0; // [1, 2)
        match dtype {
            DataType::Fp32 => e.copy_from_slice(&x.to_ne_bytes()),
            DataType::Fp64 => e.copy_from_slice(&f64::from(x).to_ne_bytes()),
            DataType::Fp16 => e.copy_from_slice(&half::f16::from_f32(x).to_ne_bytes()),
            DataType::Bf16 => e.copy_from_slice(&half::bf16::from_f32(x).to_ne_bytes()),
            _ => {
                let v = u64::from(k | 1).to_ne_bytes();
                e.copy_from_slice(&v[..size]);
            }
        }
    }
}

/// Best time of `REPS` repetitions of `iters` calls of `f`.
fn best(iters: usize, mut f: impl FnMut()) -> Duration {
    f(); // warm up (page faults, caches)
    (0..REPS)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..iters {
                f();
            }
            t.elapsed()
        })
        .min()
        .unwrap()
}

fn gbps(bytes: usize, iters: usize, t: Duration) -> f64 {
    (bytes * iters) as f64 / t.as_secs_f64() / 1e9
}

fn human(bytes: usize) -> String {
    if bytes >= 1 << 20 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes >> 10)
    }
}

fn main() {
    let cases: [(DataType, ReduceOp, usize); 11] = [
        (DataType::Fp32, ReduceOp::Sum, 0),
        (DataType::Fp16, ReduceOp::Sum, 0),
        (DataType::Bf16, ReduceOp::Sum, 0),
        (DataType::Fp16, ReduceOp::Max, 0),
        (DataType::Bf16, ReduceOp::Max, 0),
        (DataType::Fp16, ReduceOp::Prod, 0),
        (DataType::Bf16, ReduceOp::Prod, 0),
        (DataType::Int32, ReduceOp::Sum, 0),
        (DataType::Fp64, ReduceOp::Max, 0),
        (DataType::Int8, ReduceOp::Prod, 0),
        // src misaligned by one byte: the copying slow path
        (DataType::Fp32, ReduceOp::Sum, 1),
    ];
    for size in [64 << 20, 256 << 10] {
        let iters = (MIN_BYTES_PER_REP / size).max(1);
        println!(
            "\nbuffer {} (dst bytes per second; best of {REPS} x {iters} calls)",
            human(size)
        );
        println!(
            "{:<8} {:<16} {:>9} {:>9}",
            "dtype", "op", "GB/s", "vs memcpy"
        );

        let mut dst = Buf::new(size, 0);
        let mut src = Buf::new(size, 0);
        fill(src.bytes_mut(), DataType::Uint8, 7);
        let t = best(iters, || {
            black_box(dst.bytes_mut()).copy_from_slice(black_box(src.bytes()));
        });
        let memcpy = gbps(size, iters, t);
        println!("{:<8} {:<16} {:>9.2} {:>9.2}", "-", "memcpy", memcpy, 1.0);

        for (dtype, op, mis) in cases {
            let mut dst = Buf::new(size, 0);
            let mut src = Buf::new(size, mis);
            fill(dst.bytes_mut(), dtype, 1);
            fill(src.bytes_mut(), dtype, 2);
            let t = best(iters, || {
                reduce_in_place(
                    dtype,
                    op,
                    black_box(dst.bytes_mut()),
                    black_box(src.bytes()),
                )
                .unwrap();
            });
            let rate = gbps(size, iters, t);
            let label = if mis == 0 {
                op.name().to_string()
            } else {
                format!("{} (unaligned)", op.name())
            };
            println!(
                "{:<8} {:<16} {:>9.2} {:>9.2}",
                dtype.name(),
                label,
                rate,
                rate / memcpy
            );
        }
    }
}
