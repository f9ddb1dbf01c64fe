//! What every flat-plane executor shares, written once: its identity
//! ([`Named`]: registered name, op, topology), the op and mode check, the
//! resource request (links from this rank to the peers its algorithm talks
//! to, on the CCL buffers), and — through [`FlatExecutor`] — its whole
//! [`CollExecutor`] impl, so an executor only states its peers and its
//! body.

use super::{CollExecutor, StagedOp};
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

    /// See [`CollExecutor::resource_variant`].
    fn variant(&self, param: &OpParam) -> Option<u32> {
        let _ = param;
        None
    }

    /// See [`CollExecutor::staged`].
    fn stages(
        &mut self,
        param: &OpParam,
        res: &AlgResourceResponse,
    ) -> Result<Option<Box<dyn StagedOp>>> {
        let _ = (param, res);
        Ok(None)
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

    fn resource_variant(&self, param: &OpParam) -> Option<u32> {
        self.variant(param)
    }

    fn staged(
        &mut self,
        param: &OpParam,
        res: &AlgResourceResponse,
    ) -> Result<Option<Box<dyn StagedOp>>> {
        check_mode(self.named().name, param, self.graph())?;
        self.stages(param, res)
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

/// The peers of a mesh plan (`MeshPlan`, the mesh, star and direct
/// executors): Send and Receive their peer; a rooted op's ranks the root
/// only, and the root every rank (p − 1 links, not one per pair: at 1,024
/// ranks a million links the plan never used); the others every rank.
/// The rooted ops' requests so depend on the root: see [`mesh_variant`].
pub(crate) fn mesh_peers(op: OpType, r: u32, n: u32, param: &OpParam) -> Vec<u32> {
    match op {
        OpType::Send | OpType::Receive => vec![param.peer],
        OpType::Broadcast | OpType::Reduce | OpType::Scatter | OpType::Gather
            if r != param.root && param.root < n =>
        {
            vec![param.root]
        }
        _ => all_peers(r, n),
    }
}

/// The resource variant of a mesh plan (see [`mesh_peers`]): a rooted
/// op's root.
pub(crate) fn mesh_variant(op: OpType, param: &OpParam) -> Option<u32> {
    matches!(
        op,
        OpType::Broadcast | OpType::Reduce | OpType::Scatter | OpType::Gather
    )
    .then_some(param.root)
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

#[cfg(test)]
mod tests {
    use super::*;
    use hccl_platform::{DataType, Device, DeviceMem, ReduceOp, Stream};

    /// The rooted mesh, star and direct plans link every rank to the root
    /// only (and the root to every rank), and say their resources depend
    /// on the root; the others link every pair and depend on nothing more.
    #[test]
    fn rooted_mesh_plans_link_ranks_to_the_root_only() {
        let device = Device::new(0, Default::default());
        let p = 8u32;
        let peers_of = |name: &str, op: OpType, me: u32, root: u32| {
            let topo = TopoInfo::new(me, vec![0; p as usize]).unwrap();
            let ex = crate::registry().create(name, &topo).unwrap();
            let param = OpParam::new(
                "t",
                op,
                Stream::new(&device),
                DeviceMem::null(),
                DeviceMem::null(),
                16,
                DataType::Fp32,
                ReduceOp::Sum,
                root,
            );
            let req = ex.calc_res_request(&param, &topo).unwrap();
            let mut peers: Vec<u32> = req.op_transport[CommPlane::Combine as usize]
                .iter()
                .flat_map(|s| s.transport_requests.iter())
                .filter(|t| t.is_valid)
                .map(|t| t.remote_user_rank)
                .collect();
            peers.sort();
            (peers, ex.resource_variant(&param))
        };
        for (name, op) in [
            ("BroadcastStarExecutor", OpType::Broadcast),
            ("ScatterMeshExecutor", OpType::Scatter),
            ("GatherStarExecutor", OpType::Gather),
            ("ReduceMeshExecutor", OpType::Reduce),
            ("BroadcastDirectExecutor", OpType::Broadcast),
            ("ReduceDirectExecutor", OpType::Reduce),
        ] {
            for root in [0, 5] {
                for me in 0..p {
                    let (peers, variant) = peers_of(name, op, me, root);
                    let want: Vec<u32> = if me == root {
                        (0..p).filter(|&q| q != me).collect()
                    } else {
                        vec![root]
                    };
                    assert_eq!(peers, want, "{name} rank {me} root {root}");
                    assert_eq!(variant, Some(root), "{name}");
                }
            }
        }
        let (peers, variant) = peers_of("AllReduceMeshExecutor", OpType::AllReduce, 3, 0);
        assert_eq!(peers, vec![0, 1, 2, 4, 5, 6, 7]);
        assert_eq!(variant, None);
    }
}
