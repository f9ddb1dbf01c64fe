//! Checks of the in-place AllGather(V) and ReduceScatter(V) forms (NCCL's
//! and `MPI_IN_PLACE`'s: the input is this rank's block of the output, or
//! the output this rank's block of the input), shared by the thread tests
//! (`tests/in_place.rs`) and the rank processes (`hccl-mp-worker ...
//! in_place`): results checked on every element against a host reference,
//! the rest of a ReduceScatter's buffer checked untouched, and the
//! overlaps that are not an in-place form refused with nothing enqueued.

use hccl_adapter::{
    DataType, DeviceBuffer, DeviceMem, HcclComm, HcclError, MemRegistration, ReduceOp, Result,
};

/// Rank `r`'s element `i`: distinct per (rank, element), exact in i32 sums.
pub fn val(r: u32, i: usize) -> i32 {
    ((r as usize * 7919 + i * 13) % 100_003) as i32
}

/// Element counts per block: one element, a count no rank count divides,
/// and more than one CCL buffer (1 MiB with `HCCL_BUFFSIZE=1`), so op-base
/// loops run several rounds.
pub const COUNTS: [usize; 3] = [1, 1003, 300_001];

fn fail(what: String) -> HcclError {
    HcclError::internal(what)
}

/// Memory for `data`: shareable (and registered with `comm` for graph
/// mode when `register`) or plain.
fn buffer(
    comm: &HcclComm,
    data: &[i32],
    register: bool,
) -> Result<(DeviceMem, Vec<MemRegistration>)> {
    let m = if register {
        DeviceMem::alloc_shareable(data.len() * 4)?
    } else {
        DeviceMem::alloc(data.len() * 4)?
    };
    m.copy_from_host(data)?;
    let handles = if register {
        vec![comm.register_mem(&m)?]
    } else {
        vec![]
    };
    Ok((m, handles))
}

fn compare(what: &str, got: &[i32], want: &[i32]) -> Result<()> {
    if got == want {
        return Ok(());
    }
    let i = got.iter().zip(want).position(|(g, w)| g != w).unwrap_or(0);
    Err(fail(format!(
        "{what}: element {i} of {} is {} but should be {}",
        want.len(),
        got.get(i).copied().unwrap_or_default(),
        want.get(i).copied().unwrap_or_default()
    )))
}

/// Runs every in-place form with `COUNTS` elements per block, on
/// registered memory (graph mode: executors work on the user buffer
/// itself) when `register`, and checks every element.
pub fn run(comm: &HcclComm, register: bool) -> Result<()> {
    let (r, p) = (comm.rank(), comm.size());
    let (ru, pu) = (r as usize, p as usize);
    let s = comm.create_stream();
    let t = DataType::Int32;
    for c in COUNTS {
        let tag =
            |op: &str| format!("in-place {op} rank {r} of {p}, {c} per block, register={register}");

        // AllGather: the input is written into this rank's block first
        let mut init = vec![-1i32; pu * c];
        for i in 0..c {
            init[ru * c + i] = val(r, i);
        }
        let (buf, regs) = buffer(comm, &init, register)?;
        let send = buf.range(ru * c * 4, c * 4)?;
        comm.all_gather_raw(&send, &buf, c as u64, t, &s)?;
        s.synchronize()?;
        let want: Vec<i32> = (0..p)
            .flat_map(|q| (0..c).map(move |i| val(q, i)))
            .collect();
        compare(&tag("AllGather"), &buf.to_vec::<i32>(pu * c)?, &want)?;
        deregister(comm, regs)?;

        // AllGatherV: uneven blocks (one empty at p > 2), gaps between them
        let counts: Vec<u64> = (0..pu)
            .map(|q| {
                if q == 1 && pu > 2 {
                    0
                } else {
                    (c + q * 5) as u64
                }
            })
            .collect();
        let mut displs = Vec::with_capacity(pu);
        let mut at = 0u64;
        for &n in &counts {
            displs.push(at);
            at += n + 3;
        }
        let total = at as usize;
        let (mine, off) = (counts[ru] as usize, displs[ru] as usize);
        let mut init = vec![-1i32; total];
        for i in 0..mine {
            init[off + i] = val(r, i);
        }
        let (buf, regs) = buffer(comm, &init, register)?;
        let send = buf.range(off * 4, mine * 4)?;
        comm.all_gather_v_raw(&send, mine as u64, &buf, &counts, &displs, t, &s)?;
        s.synchronize()?;
        let mut want = vec![-1i32; total];
        for q in 0..pu {
            for i in 0..counts[q] as usize {
                want[displs[q] as usize + i] = val(q as u32, i);
            }
        }
        compare(&tag("AllGatherV"), &buf.to_vec::<i32>(total)?, &want)?;
        deregister(comm, regs)?;

        // ReduceScatter: the result lands in this rank's block of the input
        // and the other blocks stay as they were
        let input: Vec<i32> = (0..pu * c).map(|i| val(r, i)).collect();
        let (buf, regs) = buffer(comm, &input, register)?;
        let recv = buf.range(ru * c * 4, c * 4)?;
        comm.reduce_scatter_raw(&buf, &recv, c as u64, t, ReduceOp::Sum, &s)?;
        s.synchronize()?;
        let mut want = input.clone();
        for i in 0..c {
            want[ru * c + i] = (0..p).map(|q| val(q, ru * c + i)).sum();
        }
        compare(&tag("ReduceScatter"), &buf.to_vec::<i32>(pu * c)?, &want)?;
        deregister(comm, regs)?;

        // ReduceScatterV: uneven blocks, gaps, reduced with max
        let (buf, regs) = buffer(
            comm,
            &(0..total).map(|i| val(r, i)).collect::<Vec<_>>(),
            register,
        )?;
        let recv = buf.range(off * 4, mine * 4)?;
        comm.reduce_scatter_v_raw(
            &buf,
            &counts,
            &displs,
            &recv,
            mine as u64,
            t,
            ReduceOp::Max,
            &s,
        )?;
        s.synchronize()?;
        let got = buf.to_vec::<i32>(total)?;
        let want: Vec<i32> = (0..mine)
            .map(|i| (0..p).map(|q| val(q, off + i)).max().unwrap_or_default())
            .collect();
        compare(&tag("ReduceScatterV"), &got[off..off + mine], &want)?;
        deregister(comm, regs)?;

        // the typed forms
        let mut buf = DeviceBuffer::<i32>::from_slice(&init_block(pu, c, r))?;
        comm.all_gather_in_place(&mut buf, &s)?;
        s.synchronize()?;
        let want: Vec<i32> = (0..p)
            .flat_map(|q| (0..c).map(move |i| val(q, i)))
            .collect();
        compare(&tag("all_gather_in_place"), &buf.to_vec()?, &want)?;
        let input: Vec<i32> = (0..pu * c).map(|i| val(r, i)).collect();
        let mut buf = DeviceBuffer::<i32>::from_slice(&input)?;
        comm.reduce_scatter_in_place(&mut buf, ReduceOp::Sum, &s)?;
        s.synchronize()?;
        let got = buf.to_vec()?;
        let want: Vec<i32> = (0..c)
            .map(|i| (0..p).map(|q| val(q, ru * c + i)).sum())
            .collect();
        compare(
            &tag("reduce_scatter_in_place"),
            &got[ru * c..(ru + 1) * c],
            &want,
        )?;
    }
    Ok(())
}

/// A gather buffer holding only this rank's block (the rest -1).
fn init_block(p: usize, c: usize, r: u32) -> Vec<i32> {
    let mut v = vec![-1i32; p * c];
    for i in 0..c {
        v[r as usize * c + i] = val(r, i);
    }
    v
}

fn deregister(comm: &HcclComm, regs: Vec<MemRegistration>) -> Result<()> {
    for reg in &regs {
        comm.deregister_mem(reg)?;
    }
    Ok(())
}
