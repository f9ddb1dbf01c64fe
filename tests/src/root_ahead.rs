//! A root that runs far ahead of sleeping peers (issue 30): the root
//! issues more rooted ops (Broadcast and Scatter, whose root only sends)
//! than a board has header slots (256) before its peers issue any, at
//! every size class the small-op paths have (inline in a header slot, a
//! data entry, beyond the AIV kernel's reach), then every rank checks
//! every op's result exactly. Shared by the thread test
//! (`tests/aiv_ops.rs`) and the rank processes (`hccl-mp-worker ...
//! root_ahead`).

use hccl_adapter::{DataType, DeviceMem, HcclComm, HcclError, Result};
use std::time::Duration;

/// Ops the root issues before its peers start: past the 256 header slots.
pub const OPS: usize = 300;

/// Elements per rank of each size class: 2 (8 B: inline in the header
/// slot), 1000 (4 KB: a data entry), 20 000 (80 KB: past AIV_MAX_BYTES,
/// another executor).
pub const SIZES: [usize; 3] = [2, 1000, 20_000];

/// Element `k` of the root's input of op `i`: distinct per op.
pub fn val(i: usize, k: usize) -> i32 {
    (i * 1_000_003 + k * 7) as i32
}

/// Runs the scenario on `comm` with `root`; peers sleep `sleep` first.
pub fn run(comm: &HcclComm, root: u32, sleep: Duration) -> Result<()> {
    let (r, p) = (comm.rank(), comm.size() as usize);
    let s = comm.create_stream();
    let t = DataType::Int32;
    if r != root {
        std::thread::sleep(sleep);
    }
    // op i: size class i % 3, Broadcast on even i, Scatter on odd
    let mut bufs = Vec::with_capacity(OPS);
    for i in 0..OPS {
        let n = SIZES[i % SIZES.len()];
        let whole = if i % 2 == 0 { n } else { n * p };
        let send = DeviceMem::alloc(whole * 4)?;
        let data: Vec<i32> = if r == root {
            (0..whole).map(|k| val(i, k)).collect()
        } else {
            vec![-1; whole]
        };
        send.copy_from_host(&data)?;
        let recv = DeviceMem::alloc(n * 4)?;
        if i % 2 == 0 {
            comm.broadcast_raw(&send, n as u64, t, root, &s)?;
        } else {
            comm.scatter_raw(&send, &recv, n as u64, t, root, &s)?;
        }
        bufs.push((send, recv, n));
    }
    s.synchronize()?;
    for (i, (send, recv, n)) in bufs.iter().enumerate() {
        let (got, want): (Vec<i32>, Vec<i32>) = if i % 2 == 0 {
            (send.to_vec(*n)?, (0..*n).map(|k| val(i, k)).collect())
        } else {
            (
                recv.to_vec(*n)?,
                (0..*n).map(|k| val(i, r as usize * n + k)).collect(),
            )
        };
        if got != want {
            let k = got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(0);
            return Err(HcclError::internal(format!(
                "rank {r} of {p}, root {root}: op {i} ({} of {n} per rank) element {k} is {} but should be {}",
                if i % 2 == 0 { "Broadcast" } else { "Scatter" },
                got[k],
                want[k]
            )));
        }
    }
    Ok(())
}
