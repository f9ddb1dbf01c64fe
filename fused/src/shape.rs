//! What one fused op computes, checked on this rank and then agreed by
//! every rank (one small AllGather, which is also the op's opening
//! barrier: once it returns, every rank has finished its previous fused
//! op, so nobody still reads the windows this op rewrites).

use crate::config::FusedPath;
use hccl_adapter::{DataType, DeviceMem, HcclComm};
use hccl_platform::cube::Mat;
use hccl_platform::{HcclError, Result};

/// The three fused ops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OpKind {
    MatmulReduceScatter = 1,
    AllGatherMatmul = 2,
    MatmulAllReduce = 3,
}

impl OpKind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            OpKind::MatmulReduceScatter => "matmul_reduce_scatter",
            OpKind::AllGatherMatmul => "all_gather_matmul",
            OpKind::MatmulAllReduce => "matmul_all_reduce",
        }
    }
}

/// Rows `[offset, offset + count)` of `m` that rank `r` of `p` owns: the
/// first `m mod p` ranks get one row more.
pub fn split_rows(m: usize, p: usize, r: usize) -> (usize, usize) {
    let (q, extra) = (m / p, m % p);
    (r * q + r.min(extra), q + usize::from(r < extra))
}

/// One rank's view of an op, as exchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    /// 0: this rank's own checks passed.
    pub status: u32,
    pub kind: u32,
    pub dtype: u32,
    pub path: u32,
    /// A's rows (this rank's shard's for AllGather+MatMul).
    pub m: u64,
    pub k: u64,
    pub n: u64,
    pub block_rows: u64,
    pub stages: u32,
    pub pid: u32,
    /// The output's rows.
    pub out_rows: u64,
    /// The gathered A's rows (AllGather+MatMul; `u64::MAX`: not asked).
    pub gathered_rows: u64,
}

const RECORD: usize = 80;

impl Record {
    fn bytes(&self) -> [u8; RECORD] {
        let mut b = [0u8; RECORD];
        let w32 = [
            self.status,
            self.kind,
            self.dtype,
            self.path,
            self.stages,
            self.pid,
        ];
        for (i, v) in w32.iter().enumerate() {
            b[i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
        }
        let w64 = [
            self.m,
            self.k,
            self.n,
            self.block_rows,
            self.out_rows,
            self.gathered_rows,
        ];
        for (i, v) in w64.iter().enumerate() {
            b[24 + i * 8..32 + i * 8].copy_from_slice(&v.to_le_bytes());
        }
        b
    }

    fn parse(b: &[u8]) -> Record {
        let u32_at = |i: usize| u32::from_le_bytes(b[i * 4..i * 4 + 4].try_into().expect("4"));
        let u64_at =
            |i: usize| u64::from_le_bytes(b[24 + i * 8..32 + i * 8].try_into().expect("8"));
        Record {
            status: u32_at(0),
            kind: u32_at(1),
            dtype: u32_at(2),
            path: u32_at(3),
            stages: u32_at(4),
            pid: u32_at(5),
            m: u64_at(0),
            k: u64_at(1),
            n: u64_at(2),
            block_rows: u64_at(3),
            out_rows: u64_at(4),
            gathered_rows: u64_at(5),
        }
    }
}

/// Checks this rank's operands of `kind`: types, and that A, B and the
/// output(s) chain. Returns A's rows (the shard's for AllGather+MatMul).
/// `out_rows` is what the output must have given the rows every rank
/// agreed on, checked after the exchange (`check_out`).
pub(crate) fn check_local(kind: OpKind, a: &Mat, b: &Mat, out: &Mat) -> Result<()> {
    let dt = a.dtype();
    if !matches!(dt, DataType::Fp32 | DataType::Bf16 | DataType::Fp16) {
        return Err(HcclError::para(format!(
            "{}: A has data type {}; fused ops take fp32, bf16 and fp16",
            kind.name(),
            dt.name()
        )));
    }
    for (what, m) in [("B", b), ("the output", out)] {
        if m.dtype() != dt {
            return Err(HcclError::para(format!(
                "{}: {what} has data type {} but A has {}; all operands must share one type",
                kind.name(),
                m.dtype().name(),
                dt.name()
            )));
        }
    }
    if a.col_count() != b.row_count() {
        return Err(HcclError::para(format!(
            "{}: A is {}×{} and B {}×{}: A's columns must equal B's rows",
            kind.name(),
            a.row_count(),
            a.col_count(),
            b.row_count(),
            b.col_count()
        )));
    }
    if out.col_count() != b.col_count() {
        return Err(HcclError::para(format!(
            "{}: the output has {} columns, B has {}",
            kind.name(),
            out.col_count(),
            b.col_count()
        )));
    }
    for (what, m) in [("A", a), ("B", b)] {
        if overlaps(m, out) {
            return Err(HcclError::para(format!(
                "{}: the output overlaps {what}",
                kind.name()
            )));
        }
    }
    Ok(())
}

/// Whether the byte spans of two matrices meet.
pub(crate) fn overlaps(x: &Mat, y: &Mat) -> bool {
    let span = |m: &Mat| {
        let s = m.mem().addr() as usize;
        let len = Mat::bytes_for(m.dtype(), m.row_count(), m.col_count(), m.ld());
        (s, s + len)
    };
    let ((a0, a1), (b0, b1)) = (span(x), span(y));
    a0 < a1 && b0 < b1 && a0 < b1 && b0 < a1
}

/// Every rank's record; an error on every rank if any rank's checks
/// failed or the ranks disagree on the op.
pub(crate) fn agree(comm: &HcclComm, kind: OpKind, mine: Record) -> Result<Vec<Record>> {
    let p = comm.size() as usize;
    let send = DeviceMem::alloc(RECORD)?;
    send.copy_from_host_bytes(&mine.bytes())?;
    let recv = DeviceMem::alloc(RECORD * p)?;
    let stream = comm.create_stream();
    comm.all_gather_raw(&send, &recv, RECORD as u64, DataType::Uint8, &stream)?;
    stream.synchronize()?;
    let mut all = vec![0u8; RECORD * p];
    recv.copy_to_host_bytes(&mut all)?;
    let recs: Vec<Record> = all.chunks(RECORD).map(Record::parse).collect();
    let failed: Vec<usize> = (0..p).filter(|&r| recs[r].status != 0).collect();
    if !failed.is_empty() {
        return Err(HcclError::para(format!(
            "{}: rank(s) {failed:?} refused their operands (see their errors); no rank ran the op",
            kind.name()
        )));
    }
    let differ = |f: &dyn Fn(&Record) -> u64, what: &str| -> Result<()> {
        if recs.iter().any(|r| f(r) != f(&recs[0])) {
            let vals: Vec<String> = recs.iter().map(|r| f(r).to_string()).collect();
            return Err(HcclError::para(format!(
                "{}: ranks disagree on {what}: {} (by rank)",
                kind.name(),
                vals.join(", ")
            )));
        }
        Ok(())
    };
    differ(&|r| r.kind as u64, "the op")?;
    differ(&|r| r.dtype as u64, "the data type (code)")?;
    differ(&|r| r.k, "K (A's columns, B's rows)")?;
    differ(&|r| r.n, "N (B's columns)")?;
    if kind != OpKind::AllGatherMatmul {
        differ(&|r| r.m, "M (A's rows)")?;
    }
    Ok(recs)
}

/// The error a rank whose own checks failed returns after the exchange
/// (so that its peers are not left waiting).
pub(crate) fn record_of(
    kind: OpKind,
    local: &Result<()>,
    a: &Mat,
    b: &Mat,
    path: FusedPath,
    block_rows: usize,
    stages: usize,
) -> Record {
    Record {
        status: u32::from(local.is_err()),
        kind: kind as u32,
        dtype: a.dtype() as u32,
        path: path.code(),
        m: a.row_count() as u64,
        k: a.col_count() as u64,
        n: b.col_count() as u64,
        block_rows: block_rows as u64,
        stages: stages as u32,
        pid: std::process::id(),
        out_rows: 0,
        gathered_rows: u64::MAX,
    }
}

/// AllGather+MatMul: every rank's output (and gathered A, if asked) must
/// have the sum of the shards' rows; checked on every rank from every
/// rank's record, so all refuse together.
pub(crate) fn check_gathered_rows(recs: &[Record]) -> Result<()> {
    let total: u64 = recs.iter().map(|r| r.m).sum();
    for (q, r) in recs.iter().enumerate() {
        if r.out_rows != total {
            return Err(HcclError::para(format!(
                "all_gather_matmul: rank {q}'s output has {} rows; the shards have {total} in all",
                r.out_rows
            )));
        }
        if r.gathered_rows != u64::MAX && r.gathered_rows != total {
            return Err(HcclError::para(format!(
                "all_gather_matmul: rank {q}'s gathered A has {} rows; the shards have \
                 {total} in all",
                r.gathered_rows
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_split_with_the_remainder_on_the_first_ranks() {
        let parts: Vec<_> = (0..4).map(|r| split_rows(10, 4, r)).collect();
        assert_eq!(parts, vec![(0, 3), (3, 3), (6, 2), (8, 2)]);
        assert_eq!(split_rows(2, 3, 2), (2, 0));
        let total: usize = (0..7).map(|r| split_rows(1001, 7, r).1).sum();
        assert_eq!(total, 1001);
    }

    #[test]
    fn records_round_trip() {
        let r = Record {
            status: 1,
            kind: 2,
            dtype: 11,
            path: 3,
            m: 1 << 40,
            k: 7,
            n: 9,
            block_rows: 128,
            stages: 2,
            pid: 1234,
            out_rows: 5,
            gathered_rows: u64::MAX,
        };
        assert_eq!(Record::parse(&r.bytes()), r);
    }
}
