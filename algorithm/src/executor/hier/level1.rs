//! Level-1 (inter-host) allreduce algorithms of the hierarchical executors,
//! chosen by name.
//!
//! A two-level executor is built with one [`Level1Algorithm`]; the built-in
//! ones are ring, RHD (`H-D_R`), NHR and NB. Another crate adds its own by
//! implementing the trait and registering the executors that use it with
//! [`super::register_level1`].

use crate::cost::{terms, Algo};
use crate::executor::flat::ring_peers;
use crate::op::OpType;
use crate::template::nhr_nb::{self, Family};
use crate::template::{rhd, ring, RingAllGather, RingReduceScatter, Slice};
use crate::topo::SubCommInfo;
use hccl_platform::{DataType, DeviceMem, HcclError, MemKind, ReduceOp, Result, Stream};

/// An allreduce among the ranks of one level-1 group.
pub trait Level1Algorithm: Send + Sync + std::fmt::Debug {
    /// The name `HCCL_ALGO` gives it on level 1 (`ring`, `H-D_R`, `NHR`, ...).
    fn algo_name(&self) -> &'static str;

    /// What executor names using it end with before `Executor`: empty for
    /// ring (the default), else e.g. `RHD`, `NHR`.
    fn suffix(&self) -> &'static str;

    /// The sub-comm ranks that sub-comm rank `r` of `n` exchanges data with.
    fn peers(&self, r: u32, n: u32) -> Vec<u32>;

    /// Enqueues an allreduce among `comm` of `data` = (input, output,
    /// base): `input` is this rank's CCL input at byte `base` (the same
    /// place on every member); `output` is the CCL output at `base`, as
    /// long as `input`, which peers may write into. The result must end in
    /// `output`.
    fn all_reduce(
        &self,
        stream: &Stream,
        comm: &SubCommInfo,
        data: (&DeviceMem, &DeviceMem, usize),
        how: (DataType, ReduceOp),
    ) -> Result<()>;

    /// The cost model's (steps, bytes the busiest rank sends, bytes it
    /// reduces) of one such allreduce of `bytes` bytes on `n` ranks.
    fn terms(&self, n: u32, bytes: u64) -> (f64, f64, f64);

    /// Whether [`all_reduce_in`](Self::all_reduce_in) is implemented: the
    /// TwoLevel AllReduce then runs in graph mode.
    fn graph(&self) -> bool {
        false
    }

    /// Graph mode's allreduce among `comm` of the bytes in `w`, in place:
    /// `w` is part of the user output, which peers address as `w_at`
    /// (buffer and offset of its first byte); partials may land in
    /// `landing` (as long as `w`, addressed as `landing_at`).
    fn all_reduce_in(
        &self,
        stream: &Stream,
        comm: &SubCommInfo,
        bufs: (&DeviceMem, &DeviceMem),
        at: ((MemKind, usize), (MemKind, usize)),
        how: (DataType, ReduceOp),
    ) -> Result<()> {
        let _ = (stream, comm, bufs, at, how);
        Err(HcclError::not_support(format!(
            "level-1 algorithm {} has no graph-mode allreduce",
            self.algo_name()
        )))
    }
}

/// Moves the result of an allreduce that ends in its working buffer (the
/// CCL input: RHD, NHR, NB) to the CCL output, where the trait promises it.
fn result_to_output(stream: &Stream, input: &DeviceMem, output: &DeviceMem) -> Result<()> {
    if input.is_empty() {
        return Ok(());
    }
    stream.memcpy_async(output, input)
}

/// Level-1 ring: reduce-scatter then allgather around the group.
#[derive(Debug)]
pub(crate) struct RingLevel1;

impl Level1Algorithm for RingLevel1 {
    fn algo_name(&self) -> &'static str {
        "ring"
    }
    fn suffix(&self) -> &'static str {
        ""
    }
    fn peers(&self, r: u32, n: u32) -> Vec<u32> {
        ring_peers(r, n)
    }
    fn all_reduce(
        &self,
        stream: &Stream,
        comm: &SubCommInfo,
        (input, output, base): (&DeviceMem, &DeviceMem, usize),
        how: (DataType, ReduceOp),
    ) -> Result<()> {
        ring::all_reduce(
            stream,
            comm,
            (input, output),
            (MemKind::CclOutput, base),
            how,
        )
    }
    fn terms(&self, n: u32, bytes: u64) -> (f64, f64, f64) {
        terms(Algo::Ring, OpType::AllReduce, n, bytes).unwrap_or_default()
    }
    fn graph(&self) -> bool {
        true
    }
    fn all_reduce_in(
        &self,
        stream: &Stream,
        comm: &SubCommInfo,
        (w, landing): (&DeviceMem, &DeviceMem),
        (w_at, landing_at): ((MemKind, usize), (MemKind, usize)),
        how: (DataType, ReduceOp),
    ) -> Result<()> {
        let slices = Slice::split(w.len(), comm.local_rank_size as usize);
        let rs = (w.clone(), landing.clone(), slices.clone());
        RingReduceScatter::new(rs, landing_at, how).run(stream, comm)?;
        RingAllGather::new((w.clone(), slices), w_at).run(stream, comm)
    }
}

/// Level-1 recursive halving/doubling (HCCL's `H-D_R`), for any group size.
#[derive(Debug)]
pub(crate) struct RhdLevel1;

impl Level1Algorithm for RhdLevel1 {
    fn algo_name(&self) -> &'static str {
        "H-D_R"
    }
    fn suffix(&self) -> &'static str {
        "RHD"
    }
    fn peers(&self, r: u32, n: u32) -> Vec<u32> {
        rhd::partners(r, n)
    }
    fn all_reduce(
        &self,
        stream: &Stream,
        comm: &SubCommInfo,
        (input, output, base): (&DeviceMem, &DeviceMem, usize),
        how: (DataType, ReduceOp),
    ) -> Result<()> {
        rhd::all_reduce(stream, comm, (input, output, base), how)?;
        result_to_output(stream, input, output)
    }
    fn terms(&self, n: u32, bytes: u64) -> (f64, f64, f64) {
        terms(Algo::Rhd, OpType::AllReduce, n, bytes).unwrap_or_default()
    }
    fn graph(&self) -> bool {
        true
    }
    fn all_reduce_in(
        &self,
        stream: &Stream,
        comm: &SubCommInfo,
        bufs: (&DeviceMem, &DeviceMem),
        at: ((MemKind, usize), (MemKind, usize)),
        how: (DataType, ReduceOp),
    ) -> Result<()> {
        rhd::all_reduce_in(stream, comm, bufs, at, how)
    }
}

/// Level-1 NHR or NB (seed 002 §3.7, §3.8): the flat executors'
/// reduce-scatter + allgather plans among the hosts, ⌈log2 H⌉ steps per
/// phase for any host count H, where a ring needs H − 1 and RHD folds.
#[derive(Debug)]
pub(crate) struct NonuniformLevel1 {
    fam: Family,
}

impl NonuniformLevel1 {
    /// Level-1 NHR (`HCCL_ALGO` `level1:NHR`).
    pub(crate) const NHR: NonuniformLevel1 = NonuniformLevel1 { fam: Family::Nhr };
    /// Level-1 NB (`HCCL_ALGO` `level1:NB`).
    pub(crate) const NB: NonuniformLevel1 = NonuniformLevel1 { fam: Family::Nb };
}

impl Level1Algorithm for NonuniformLevel1 {
    fn algo_name(&self) -> &'static str {
        match self.fam {
            Family::Nhr => "NHR",
            Family::Nb => "NB",
        }
    }
    fn suffix(&self) -> &'static str {
        self.algo_name()
    }
    fn peers(&self, r: u32, n: u32) -> Vec<u32> {
        nhr_nb::peers(r, n)
    }
    fn all_reduce(
        &self,
        stream: &Stream,
        comm: &SubCommInfo,
        (input, output, base): (&DeviceMem, &DeviceMem, usize),
        how: (DataType, ReduceOp),
    ) -> Result<()> {
        nhr_nb::all_reduce(stream, comm, self.fam, (input, output, base), how)?;
        result_to_output(stream, input, output)
    }
    fn terms(&self, n: u32, bytes: u64) -> (f64, f64, f64) {
        let algo = match self.fam {
            Family::Nhr => Algo::Nhr,
            Family::Nb => Algo::Nb,
        };
        terms(algo, OpType::AllReduce, n, bytes).unwrap_or_default()
    }
    fn graph(&self) -> bool {
        true
    }
    fn all_reduce_in(
        &self,
        stream: &Stream,
        comm: &SubCommInfo,
        bufs: (&DeviceMem, &DeviceMem),
        at: ((MemKind, usize), (MemKind, usize)),
        how: (DataType, ReduceOp),
    ) -> Result<()> {
        nhr_nb::all_reduce_in(stream, comm, self.fam, bufs, at, how)
    }
}

/// The built-in level-1 algorithms (the registry's table names its own;
/// the tests check the two agree).
#[cfg(test)]
pub(crate) fn builtin_level1() -> Vec<std::sync::Arc<dyn Level1Algorithm>> {
    use std::sync::Arc;
    vec![
        Arc::new(RingLevel1),
        Arc::new(RhdLevel1),
        Arc::new(NonuniformLevel1::NHR),
        Arc::new(NonuniformLevel1::NB),
    ]
}
