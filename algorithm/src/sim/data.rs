//! Input patterns and reference results for the simulator's checks.

use half::{bf16, f16};
use hccl_platform::reduce_into;
use hccl_platform::{DataType, ReduceOp, Result};

/// Small integer for rank `rank`, element `i`: sums stay within ±2p and
/// float products are powers of two, so results are exact (independent of
/// reduction order) in fp32/fp64 at any rank count and in fp16/bf16 for
/// small ones; integer types wrap deterministically.
fn value(op: Option<ReduceOp>, dtype: DataType, rank: u32, i: usize) -> i8 {
    let Some(op) = op else {
        // data movement only: values that differ between ranks and
        // positions, so a block landing in the wrong place is caught
        return ((rank as usize * 37 + i * 11) % 101) as i8 - 50;
    };
    let k = (i.wrapping_mul(7) + rank as usize * 3) % 5;
    match op {
        ReduceOp::Prod if dtype.is_float() => [1, 2, 1, -1, -2][k],
        ReduceOp::Prod => [1, 3, -1, 5, 2][k],
        _ => k as i8 - 2,
    }
}

fn encode(dtype: DataType, v: i8, out: &mut Vec<u8>) {
    let unsigned = |v: i8| v.unsigned_abs();
    match dtype {
        DataType::Int8 => out.extend_from_slice(&v.to_ne_bytes()),
        DataType::Int16 => out.extend_from_slice(&(v as i16).to_ne_bytes()),
        DataType::Int32 => out.extend_from_slice(&(v as i32).to_ne_bytes()),
        DataType::Int64 => out.extend_from_slice(&(v as i64).to_ne_bytes()),
        DataType::Uint8 => out.extend_from_slice(&unsigned(v).to_ne_bytes()),
        DataType::Uint16 => out.extend_from_slice(&(unsigned(v) as u16).to_ne_bytes()),
        DataType::Uint32 => out.extend_from_slice(&(unsigned(v) as u32).to_ne_bytes()),
        DataType::Uint64 => out.extend_from_slice(&(unsigned(v) as u64).to_ne_bytes()),
        DataType::Fp16 => out.extend_from_slice(&f16::from_f32(v as f32).to_bits().to_ne_bytes()),
        DataType::Bf16 => out.extend_from_slice(&bf16::from_f32(v as f32).to_bits().to_ne_bytes()),
        DataType::Fp32 => out.extend_from_slice(&(v as f32).to_ne_bytes()),
        DataType::Fp64 => out.extend_from_slice(&(v as f64).to_ne_bytes()),
        // 1-byte formats that are only moved: bytes 0x01..=0x65, positive
        // finite numbers in each of HIF8, E4M3, E5M2 and E8M0 (no NaN or
        // infinity pattern), one per value
        DataType::Hif8 | DataType::Fp8E4M3 | DataType::Fp8E5M2 | DataType::Fp8E8M0 => {
            out.push((v as i16 + 51) as u8)
        }
    }
}

/// The bytes of rank `rank`'s input of `count` elements; `op` is the
/// reduction of reducing ops, `None` for data-movement ops.
pub(crate) fn input(dtype: DataType, op: Option<ReduceOp>, rank: u32, count: usize) -> Vec<u8> {
    // the pattern repeats every 5 (reducing) or 101 (moving) elements:
    // encode one period, then copy it (1,000-rank plans fill gigabytes)
    if count == 0 {
        return Vec::new();
    }
    let period = if op.is_some() { 5 } else { 101 }.min(count);
    let mut one = Vec::with_capacity(period * dtype.size());
    for i in 0..period {
        encode(dtype, value(op, dtype, rank, i), &mut one);
    }
    let total = count * dtype.size();
    let mut out = Vec::with_capacity(total);
    while out.len() + one.len() <= total {
        out.extend_from_slice(&one);
    }
    out.extend_from_slice(&one[..total - out.len()]);
    out
}

/// Reduces `blocks` in order with `op`.
pub(crate) fn fold(dtype: DataType, op: ReduceOp, blocks: &[&[u8]]) -> Result<Vec<u8>> {
    let mut acc = blocks[0].to_vec();
    let mut next = vec![0u8; acc.len()];
    for b in &blocks[1..] {
        reduce_into(dtype, op, &mut next, &acc, b)?;
        std::mem::swap(&mut acc, &mut next);
    }
    Ok(acc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_periodic_fill_equals_the_element_by_element_pattern() {
        for dtype in DataType::ALL {
            for op in [None, Some(ReduceOp::Sum), Some(ReduceOp::Prod)] {
                for count in [0usize, 1, 4, 5, 6, 100, 101, 102, 1000] {
                    let mut want = Vec::new();
                    for i in 0..count {
                        encode(dtype, value(op, dtype, 3, i), &mut want);
                    }
                    assert_eq!(input(dtype, op, 3, count), want, "{dtype} {op:?} {count}");
                }
            }
        }
    }
}
