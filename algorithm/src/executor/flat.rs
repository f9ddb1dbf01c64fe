//! What every flat-plane executor shares, written once: its identity
//! ([`Named`]: registered name, op, topology), the op and mode check, the
//! resource request (links from this rank to the peers its algorithm talks
//! to, on the CCL buffers), and — through [`FlatExecutor`] — its whole
//! [`CollExecutor`] impl, so an executor only states its peers and its
//! body.

use super::CollExecutor;
use crate::op::{OpParam, OpType, WorkflowMode};
use crate::resource::{AlgResourceRequest, AlgResourceResponse, SingleSubCommTransport};
use crate::topo::{CommPlane, SubCommInfo, TopoInfo};
use hccl_platform::{HcclError, MemKind, Result};

/// What an executor on the flat plane knows about itself (one type may
/// serve several ops, each registered under its own name).
#[derive(Clone, Debug)]
pub(crate) struct Named {
    /// The registered name.
    pub name: &'static str,
    /// The op it runs.
    pub op: OpType,
    /// The communicator's topology.
    pub topo: TopoInfo,
}

impl Named {
    /// `name` running `op` on `topo`.
    pub(crate) fn new(name: &'static str, op: OpType, topo: &TopoInfo) -> Self {
        Named {
            name,
            op,
            topo: topo.clone(),
        }
    }
}

/// A flat-plane executor: its identity, the peers it needs links to, and
/// its body. Every such type gets [`CollExecutor`] from the impl below:
/// `name` is the registered name, `calc_res_request` checks the op and
/// asks for links to [`peers`](Self::peers) on the `Combine` plane,
/// `orchestrate` runs [`run`](Self::run).
pub(crate) trait FlatExecutor: Send {
    /// The executor's name, op and topology.
    fn named(&self) -> &Named;

    /// The sub-comm ranks that rank `r` of `n` exchanges data with for `param`.
    fn peers(&self, r: u32, n: u32, param: &OpParam) -> Vec<u32>;

    /// Enqueues the op (HCCL's `Orchestrate`).
    fn run(&mut self, param: &OpParam, res: &AlgResourceResponse) -> Result<()>;

    /// Whether [`run`](Self::run) works in graph mode (see
    /// [`CollExecutor::supports_graph`]).
    fn graph(&self) -> bool {
        false
    }
}

impl<T: FlatExecutor> CollExecutor for T {
    fn name(&self) -> &str {
        self.named().name
    }

    fn calc_res_request(&self, param: &OpParam, topo: &TopoInfo) -> Result<AlgResourceRequest> {
        let n = self.named();
        check_mode(n.name, param, self.graph())?;
        flat_request(n.name, n.op, param, topo, |r, size| {
            self.peers(r, size, param)
        })
    }

    fn orchestrate(&mut self, param: &OpParam, res: &AlgResourceResponse) -> Result<()> {
        check_mode(self.named().name, param, self.graph())?;
        self.run(param, res)
    }

    fn supports_graph(&self) -> bool {
        self.graph()
    }
}

/// Checks that executor `name`, which runs `want`, was asked for that
/// (the mode is checked by [`check_mode`]).
pub(crate) fn check_op(name: &str, want: OpType, param: &OpParam) -> Result<()> {
    if param.op_type != want {
        return Err(HcclError::not_support(format!(
            "{name} runs {want}, not {}",
            param.op_type
        )));
    }
    Ok(())
}

/// Checks that executor `name` can run `param`'s mode (`graph`: whether it
/// runs in graph mode as well as op-base).
pub(crate) fn check_mode(name: &str, param: &OpParam, graph: bool) -> Result<()> {
    if param.mode == WorkflowMode::Graph && !graph {
        return Err(HcclError::not_support(format!(
            "{name} runs in op-base mode only (it stages user data through the CCL buffers); \
             graph mode runs the AIV and direct executors, on one host"
        )));
    }
    Ok(())
}

/// A request for executor `name` running `want`: links on the `Combine`
/// plane from this rank (sub-comm index `r` of `n`) to `peers(r, n)`.
pub(crate) fn flat_request(
    name: &str,
    want: OpType,
    param: &OpParam,
    topo: &TopoInfo,
    peers: impl Fn(u32, u32) -> Vec<u32>,
) -> Result<AlgResourceRequest> {
    check_op(name, want, param)?;
    let mut req = AlgResourceRequest::default();
    // the shared 0..p: sub-comm ranks are user ranks on this plane
    let ranks = topo.flat_ranks();
    let n = ranks.len() as u32;
    if n > 1 {
        let r = topo.user_rank;
        req.op_transport[CommPlane::Combine as usize].push(SingleSubCommTransport::new(
            ranks,
            topo.user_rank,
            &peers(r, n),
            MemKind::CclInput,
            MemKind::CclOutput,
        )?);
    }
    Ok(req)
}

/// Ring neighbours of sub-comm rank `r` of `n`.
pub(crate) fn ring_peers(r: u32, n: u32) -> Vec<u32> {
    vec![(r + n - 1) % n, (r + 1) % n]
}

/// Every other rank.
pub(crate) fn all_peers(_r: u32, n: u32) -> Vec<u32> {
    (0..n).collect()
}

/// Graph mode's first step: the peers that write into this rank's user
/// buffers learn where they are, and this rank learns where the peers it
/// writes into keep theirs (their `ParamInput` / `ParamOutput`, mapped
/// once per peer by the link). Every rank exchanges with every one of its
/// executor's peers — a symmetric relation, so both ends of each link
/// agree — sending all its addresses before waiting for any.
pub(crate) fn share_user_buffers(param: &OpParam, comm: &SubCommInfo, peers: &[u32]) -> Result<()> {
    let mut peers = peers.to_vec();
    peers.sort_unstable();
    peers.dedup();
    peers.retain(|&q| q != comm.local_rank);
    let s = &param.stream;
    for &q in &peers {
        comm.link(q)?
            .expose_param_mem(&param.input, &param.output, s)?;
    }
    for &q in &peers {
        comm.link(q)?.rx_param_mem(s)?;
    }
    Ok(())
}

/// Whether `param` runs in graph mode (on the user buffers).
pub(crate) fn is_graph(param: &OpParam) -> bool {
    param.mode == WorkflowMode::Graph
}

/// Copies the whole user input into the user output (nothing when the op
/// runs in place): graph-mode executors then work in the output.
pub(crate) fn input_to_output(param: &OpParam, bytes: usize) -> Result<()> {
    let (src, dst) = (param.input.range(0, bytes)?, param.output.range(0, bytes)?);
    if !src.same_range(&dst) && bytes > 0 {
        param.stream.memcpy_async(&dst, &src)?;
    }
    Ok(())
}
