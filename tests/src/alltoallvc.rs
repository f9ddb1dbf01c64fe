//! AllToAllVC (HCCL's `HcclAlltoAllVC`) cases that thread tests and rank
//! processes share: irregular count matrices with zero entries, whole zero
//! rows and columns, a diagonal-only and an all-zero matrix, each run and
//! checked against a reference computed on the host from the matrix alone.

use hccl_adapter::{
    all_to_all_vc_layout, DataType, DeviceMem, HcclComm, HcclError, Result, Stream,
};

/// Element `k` of rank `q`'s send buffer: distinct per (rank, element).
pub fn val(q: u32, k: usize) -> i32 {
    (q as i32 + 1) * 10_000_000 + k as i32
}

/// Named `p` × `p` count matrices (row i: what rank i sends to each rank),
/// counts multiplied by `scale` (1: a few elements; larger: blocks that
/// span several CCL buffers).
pub fn matrices(p: u32, scale: u64) -> Vec<(&'static str, Vec<u64>)> {
    let pu = p as usize;
    let irregular = |i: usize, j: usize| -> u64 {
        // zeros scattered through the matrix, the other counts all different
        let b = ((i * 7 + j * 13 + i * j) % 6) as u64;
        if b == 0 {
            0
        } else {
            b * scale + (i + 2 * j) as u64
        }
    };
    let gen = |f: &dyn Fn(usize, usize) -> u64| -> Vec<u64> {
        (0..pu * pu).map(|x| f(x / pu, x % pu)).collect()
    };
    // rank 1 % p sends nothing, rank p - 1 receives nothing
    let (zr, zc) = (1 % pu, pu - 1);
    vec![
        ("irregular", gen(&irregular)),
        (
            "zero row and column",
            gen(&|i, j| {
                if i == zr || j == zc {
                    0
                } else {
                    irregular(i, j) + 1
                }
            }),
        ),
        (
            "one sender",
            gen(&|i, j| if i == 0 { scale + j as u64 } else { 0 }),
        ),
        (
            "diagonal only",
            gen(&|i, j| if i == j { scale + i as u64 } else { 0 }),
        ),
        ("all zero", vec![0; pu * pu]),
    ]
}

/// What rank `r` receives under `matrix`: rank i's block for it, in rank
/// order, taken from where rank i's packed send buffer holds it.
pub fn expected(matrix: &[u64], p: u32, r: u32) -> Vec<i32> {
    let (pu, ru) = (p as usize, r as usize);
    (0..pu)
        .flat_map(|i| {
            let row = &matrix[i * pu..(i + 1) * pu];
            let at = row[..ru].iter().sum::<u64>() as usize;
            (at..at + row[ru] as usize).map(move |k| val(i as u32, k))
        })
        .collect()
}

/// Runs AllToAllVC with `matrix` on `c` and checks this rank's receive
/// buffer against [`expected`]; a receive buffer with nothing to receive
/// must stay untouched.
pub fn run_case(c: &HcclComm, s: &Stream, name: &str, matrix: &[u64]) -> Result<()> {
    let (p, r) = (c.size(), c.rank());
    let l = all_to_all_vc_layout(matrix, p, r)?;
    let (st, rt) = (l.send_total as usize, l.recv_total as usize);
    let send = DeviceMem::alloc(st.max(1) * 4)?;
    send.copy_from_host(&(0..st).map(|k| val(r, k)).collect::<Vec<_>>())?;
    let recv = DeviceMem::alloc((rt + 1) * 4)?;
    recv.copy_from_host(&vec![-1i32; rt + 1])?;
    c.all_to_all_vc_raw(&send, matrix, DataType::Int32, &recv, DataType::Int32, s)?;
    s.synchronize()?;
    let got = recv.to_vec::<i32>(rt + 1)?;
    let mut want = expected(matrix, p, r);
    want.push(-1); // the element past the column sum is never written
    if got != want {
        let at = got.iter().zip(&want).position(|(g, w)| g != w);
        return Err(HcclError::internal(format!(
            "alltoallvc '{name}' p={p} rank {r}: wrong result, first difference at {at:?} of {}",
            want.len()
        )));
    }
    Ok(())
}

/// Every case of [`matrices`] at `scale`.
pub fn run_all(c: &HcclComm, s: &Stream, scale: u64) -> Result<()> {
    for (name, m) in matrices(c.size(), scale) {
        run_case(c, s, name, &m).map_err(|e| e.during(format!("alltoallvc case '{name}'")))?;
    }
    Ok(())
}
