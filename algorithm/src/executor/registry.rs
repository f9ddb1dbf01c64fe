//! The executor registry: executors by name, extensible at run time, each
//! with what it declares to the selector ([`ExecutorInfo`]).
//!
//! Every built-in executor is one row of [`BUILTINS`]: its registered
//! name, the op it runs, how it is built and its declaration (a flat
//! algorithm of the α-β-γ model, an AIV kernel, a direct read, or a
//! hierarchical executor with its level-1 algorithm). Other crates add
//! theirs with [`ExecutorRegistry::register_with`] (ranked by the
//! selector like the built-ins) or [`ExecutorRegistry::register`] (no
//! declaration: reachable only by name).

use super::decl::{AlgoTag, Candidate, Estimate, ExecutorInfo, SelectQuery};
use super::{
    AivExecutor, AllGatherRingExecutor, AllReduceRhdExecutor, AllReduceRingExecutor,
    BroadcastRingExecutor, CollExecutor, DirectExecutor, HierExecutor, HierKind, Level1Algorithm,
    MeshExecutor, MultiRingExecutor, Named, NonuniformExecutor, NonuniformLevel1, PipelineExecutor,
    ReduceScatterRingExecutor, RhdExecutor, RhdLevel1, RingLevel1, RingRootedExecutor,
};
use crate::cost::{predict, predict_hier_op, predict_multi_ring, terms, Algo};
use crate::op::OpType;
use crate::topo::TopoInfo;
use hccl_platform::{HcclError, Result};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

/// Builds an executor for a communicator's topology.
pub type ExecutorFactory = Arc<dyn Fn(&TopoInfo) -> Box<dyn CollExecutor> + Send + Sync>;

/// How a built-in row builds its executor (from the row's name and op).
type Make = fn(&Builtin, &TopoInfo) -> Box<dyn CollExecutor>;

/// A built-in level-1 (inter-host) allreduce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum L1 {
    Ring,
    Rhd,
    Nhr,
    Nb,
}

impl L1 {
    fn get(self) -> Arc<dyn Level1Algorithm> {
        match self {
            L1::Ring => Arc::new(RingLevel1),
            L1::Rhd => Arc::new(RhdLevel1),
            L1::Nhr => Arc::new(NonuniformLevel1::NHR),
            L1::Nb => Arc::new(NonuniformLevel1::NB),
        }
    }
}

/// What a built-in declares (turned into an [`ExecutorInfo`] by
/// [`Builtin::info`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Decl {
    /// A flat algorithm on any topology, priced by its α-β-γ terms
    /// ([`terms`]) on the link a flat plan crosses, `+∞` where the model
    /// has none; `HCCL_ALGO`'s name of the algorithm forces it.
    Flat(Algo),
    /// One AIV kernel, on one host whose every link reaches the boards,
    /// for payloads within `HCCL_RS_AIV_MAX_BYTES`: [`Estimate::AIV_SCORE`].
    Aiv,
    /// Peers' user buffers read directly, on one host whose every link
    /// can, from `HCCL_RS_DIRECT_MIN_BYTES` on: [`Estimate::DIRECT_SCORE`].
    Direct,
    /// A hierarchical executor on several hosts, each level priced with
    /// its own link ([`predict_hier_op`]).
    Hier(HierKind, L1),
    /// A multi-ring executor on several hosts, its channels priced by
    /// [`predict_multi_ring`] at [`Estimate::PROVISIONAL_SCORE`]: the
    /// model ranks it first for large Broadcast and Reduce across hosts,
    /// but on the machine it was measured on it was not faster than the
    /// executors it would replace (docs/performance.md), so it ranks after
    /// them until a measurement says otherwise. `HCCL_ALGO`'s `multiring`
    /// forces it.
    MultiRing,
}

/// One built-in executor.
struct Builtin {
    /// The registered name.
    name: &'static str,
    /// The op it runs.
    op: OpType,
    /// Builds it.
    make: Make,
    /// What it declares.
    decl: Decl,
}

/// A row of [`BUILTINS`].
const fn row(name: &'static str, op: OpType, make: Make, decl: Decl) -> Builtin {
    Builtin {
        name,
        op,
        make,
        decl,
    }
}

fn mesh(b: &Builtin, t: &TopoInfo) -> Box<dyn CollExecutor> {
    Box::new(MeshExecutor::new(b.name, b.op, t))
}
fn star(b: &Builtin, t: &TopoInfo) -> Box<dyn CollExecutor> {
    Box::new(MeshExecutor::star(b.name, b.op, t))
}
fn pairwise(b: &Builtin, t: &TopoInfo) -> Box<dyn CollExecutor> {
    Box::new(MeshExecutor::pairwise(b.name, b.op, t))
}
fn ring(b: &Builtin, t: &TopoInfo) -> Box<dyn CollExecutor> {
    let named = Named::new(b.name, b.op, t);
    match b.op {
        AllReduce => Box::new(AllReduceRingExecutor(named)),
        AllGather => Box::new(AllGatherRingExecutor(named)),
        ReduceScatter => Box::new(ReduceScatterRingExecutor(named)),
        Broadcast => Box::new(BroadcastRingExecutor(named)),
        _ => Box::new(RingRootedExecutor::new(b.name, b.op, t)),
    }
}
fn rhd(b: &Builtin, t: &TopoInfo) -> Box<dyn CollExecutor> {
    match b.op {
        AllReduce => Box::new(AllReduceRhdExecutor(Named::new(b.name, b.op, t))),
        _ => Box::new(RhdExecutor::new(b.name, b.op, t)),
    }
}
fn nhr(b: &Builtin, t: &TopoInfo) -> Box<dyn CollExecutor> {
    Box::new(NonuniformExecutor::nhr(b.name, b.op, t))
}
fn nb(b: &Builtin, t: &TopoInfo) -> Box<dyn CollExecutor> {
    Box::new(NonuniformExecutor::nb(b.name, b.op, t))
}
fn aiv(b: &Builtin, t: &TopoInfo) -> Box<dyn CollExecutor> {
    Box::new(AivExecutor::new(b.name, b.op, t))
}
fn direct(b: &Builtin, t: &TopoInfo) -> Box<dyn CollExecutor> {
    Box::new(DirectExecutor::new(b.name, b.op, t))
}
fn multi_ring(b: &Builtin, t: &TopoInfo) -> Box<dyn CollExecutor> {
    Box::new(MultiRingExecutor::new(b.name, b.op, t))
}
fn hier(b: &Builtin, t: &TopoInfo) -> Box<dyn CollExecutor> {
    match b.decl {
        Decl::Hier(HierKind::Pipeline, _) => Box::new(PipelineExecutor::new(b.name, b.op, t)),
        Decl::Hier(kind, l1) => Box::new(HierExecutor::new(b.name, b.op, kind, l1.get(), t)),
        _ => unreachable!("hier() builds the Hier rows only"),
    }
}

use Decl::{Aiv, Direct, Flat, Hier, MultiRing};
use HierKind::{Ahc, Pipeline, TwoLevel};
// every op but Send, whose name would shadow the marker trait
use OpType::{
    AllGather, AllGatherV, AllReduce, AllToAll, AllToAllV, Broadcast, Gather, Receive, Reduce,
    ReduceScatter, ReduceScatterV, Scatter,
};

/// Every built-in executor, one row per registered name. Per op, the
/// order is the ranking's tie order: Ring, Mesh, RHD, Star (costed as
/// Mesh), NHR, NB (costed as NHR), PairWise (never cheaper than Mesh),
/// then the hierarchical ones (TwoLevel with ring, RHD, NHR, NB level 1;
/// AHC likewise; Pipeline), then MultiRing (last: a tie keeps the
/// established executors).
#[rustfmt::skip]
static BUILTINS: &[Builtin] = &[
    // ring
    row("AllReduceRingExecutor", AllReduce, ring, Flat(Algo::Ring)),
    row("AllGatherRingExecutor", AllGather, ring, Flat(Algo::Ring)),
    row("ReduceScatterRingExecutor", ReduceScatter, ring, Flat(Algo::Ring)),
    row("BroadcastRingExecutor", Broadcast, ring, Flat(Algo::Ring)),
    row("ReduceRingExecutor", Reduce, ring, Flat(Algo::Ring)),
    row("ScatterRingExecutor", Scatter, ring, Flat(Algo::Ring)),
    row("GatherRingExecutor", Gather, ring, Flat(Algo::Ring)),
    // mesh
    row("AllReduceMeshExecutor", AllReduce, mesh, Flat(Algo::Mesh)),
    row("AllGatherMeshExecutor", AllGather, mesh, Flat(Algo::Mesh)),
    row("AllGatherVMeshExecutor", AllGatherV, mesh, Flat(Algo::Mesh)),
    row("ReduceScatterMeshExecutor", ReduceScatter, mesh, Flat(Algo::Mesh)),
    row("ReduceScatterVMeshExecutor", ReduceScatterV, mesh, Flat(Algo::Mesh)),
    row("BroadcastMeshExecutor", Broadcast, mesh, Flat(Algo::Mesh)),
    row("ReduceMeshExecutor", Reduce, mesh, Flat(Algo::Mesh)),
    row("ScatterMeshExecutor", Scatter, mesh, Flat(Algo::Mesh)),
    row("GatherMeshExecutor", Gather, mesh, Flat(Algo::Mesh)),
    row("AllToAllMeshExecutor", AllToAll, mesh, Flat(Algo::Mesh)),
    row("AllToAllVMeshExecutor", AllToAllV, mesh, Flat(Algo::Mesh)),
    row("SendExecutor", OpType::Send, mesh, Flat(Algo::Mesh)),
    row("ReceiveExecutor", Receive, mesh, Flat(Algo::Mesh)),
    // recursive halving/doubling
    row("AllReduceRHDExecutor", AllReduce, rhd, Flat(Algo::Rhd)),
    row("AllGatherRHDExecutor", AllGather, rhd, Flat(Algo::Rhd)),
    row("ReduceScatterRHDExecutor", ReduceScatter, rhd, Flat(Algo::Rhd)),
    row("BroadcastRHDExecutor", Broadcast, rhd, Flat(Algo::Rhd)),
    row("ReduceRHDExecutor", Reduce, rhd, Flat(Algo::Rhd)),
    // star
    row("BroadcastStarExecutor", Broadcast, star, Flat(Algo::Star)),
    row("ReduceStarExecutor", Reduce, star, Flat(Algo::Star)),
    row("ScatterStarExecutor", Scatter, star, Flat(Algo::Star)),
    row("GatherStarExecutor", Gather, star, Flat(Algo::Star)),
    // nonuniform hierarchical ring
    row("AllReduceNHRExecutor", AllReduce, nhr, Flat(Algo::Nhr)),
    row("AllGatherNHRExecutor", AllGather, nhr, Flat(Algo::Nhr)),
    row("ReduceScatterNHRExecutor", ReduceScatter, nhr, Flat(Algo::Nhr)),
    row("BroadcastNHRExecutor", Broadcast, nhr, Flat(Algo::Nhr)),
    row("ScatterNHRExecutor", Scatter, nhr, Flat(Algo::Nhr)),
    // nonuniform Bruck
    row("AllReduceNBExecutor", AllReduce, nb, Flat(Algo::Nb)),
    row("AllGatherNBExecutor", AllGather, nb, Flat(Algo::Nb)),
    row("ReduceScatterNBExecutor", ReduceScatter, nb, Flat(Algo::Nb)),
    row("BroadcastNBExecutor", Broadcast, nb, Flat(Algo::Nb)),
    row("ScatterNBExecutor", Scatter, nb, Flat(Algo::Nb)),
    // pairwise
    row("AllToAllPairWiseExecutor", AllToAll, pairwise, Flat(Algo::PairWise)),
    row("AllToAllVPairWiseExecutor", AllToAllV, pairwise, Flat(Algo::PairWise)),
    // AIV kernels
    row("AllReduceMeshAivExecutor", AllReduce, aiv, Aiv),
    row("AllGatherMeshAivExecutor", AllGather, aiv, Aiv),
    row("ReduceScatterMeshAivExecutor", ReduceScatter, aiv, Aiv),
    row("AllToAllMeshAivExecutor", AllToAll, aiv, Aiv),
    row("BroadcastMeshAivExecutor", Broadcast, aiv, Aiv),
    row("ReduceMeshAivExecutor", Reduce, aiv, Aiv),
    row("ScatterMeshAivExecutor", Scatter, aiv, Aiv),
    row("GatherMeshAivExecutor", Gather, aiv, Aiv),
    // direct read
    row("AllReduceDirectExecutor", AllReduce, direct, Direct),
    row("AllGatherDirectExecutor", AllGather, direct, Direct),
    row("ReduceScatterDirectExecutor", ReduceScatter, direct, Direct),
    row("AllToAllDirectExecutor", AllToAll, direct, Direct),
    row("BroadcastDirectExecutor", Broadcast, direct, Direct),
    row("ReduceDirectExecutor", Reduce, direct, Direct),
    row("ScatterDirectExecutor", Scatter, direct, Direct),
    row("GatherDirectExecutor", Gather, direct, Direct),
    row("AllGatherVDirectExecutor", AllGatherV, direct, Direct),
    row("ReduceScatterVDirectExecutor", ReduceScatterV, direct, Direct),
    row("SendDirectExecutor", OpType::Send, direct, Direct),
    row("ReceiveDirectExecutor", Receive, direct, Direct),
    // hierarchical
    row("AllReduceTwoLevelExecutor", AllReduce, hier, Hier(TwoLevel, L1::Ring)),
    row("AllReduceTwoLevelRHDExecutor", AllReduce, hier, Hier(TwoLevel, L1::Rhd)),
    row("AllReduceTwoLevelNHRExecutor", AllReduce, hier, Hier(TwoLevel, L1::Nhr)),
    row("AllReduceTwoLevelNBExecutor", AllReduce, hier, Hier(TwoLevel, L1::Nb)),
    row("AllGatherTwoLevelExecutor", AllGather, hier, Hier(TwoLevel, L1::Ring)),
    row("ReduceScatterTwoLevelExecutor", ReduceScatter, hier, Hier(TwoLevel, L1::Ring)),
    row("AllReduceAHCExecutor", AllReduce, hier, Hier(Ahc, L1::Ring)),
    row("AllReduceAHCRHDExecutor", AllReduce, hier, Hier(Ahc, L1::Rhd)),
    row("AllReduceAHCNHRExecutor", AllReduce, hier, Hier(Ahc, L1::Nhr)),
    row("AllReduceAHCNBExecutor", AllReduce, hier, Hier(Ahc, L1::Nb)),
    row("ReduceScatterAHCExecutor", ReduceScatter, hier, Hier(Ahc, L1::Ring)),
    row("AllReducePipelineExecutor", AllReduce, hier, Hier(Pipeline, L1::Ring)),
    row("AllGatherPipelineExecutor", AllGather, hier, Hier(Pipeline, L1::Ring)),
    row("ReduceScatterPipelineExecutor", ReduceScatter, hier, Hier(Pipeline, L1::Ring)),
    // one ring per channel, joined host to host
    row("AllReduceMultiRingExecutor", AllReduce, multi_ring, MultiRing),
    row("AllGatherMultiRingExecutor", AllGather, multi_ring, MultiRing),
    row("ReduceScatterMultiRingExecutor", ReduceScatter, multi_ring, MultiRing),
    row("BroadcastMultiRingExecutor", Broadcast, multi_ring, MultiRing),
    row("ReduceMultiRingExecutor", Reduce, multi_ring, MultiRing),
];

/// The most bytes a rank of `p` publishes on its board for `op` with
/// `block` input bytes per rank: [`super::aiv::aiv_payload_bytes`] without an
/// op param (the payload depends on neither the data type, the reduction
/// nor the root). `None` for ops without a kernel.
fn aiv_payload(op: OpType, p: u32, block: u64) -> Option<u64> {
    use hccl_platform::AivKind;
    use hccl_platform::{DataType, ReduceOp};
    let (dtype, red, root) = (DataType::Fp32, ReduceOp::Sum, 0);
    let kind = match op {
        AllReduce => AivKind::AllReduce { dtype, op: red },
        AllGather => AivKind::AllGather,
        ReduceScatter => AivKind::ReduceScatter { dtype, op: red },
        AllToAll => AivKind::AllToAll,
        Broadcast => AivKind::Broadcast { root },
        Reduce => AivKind::Reduce {
            dtype,
            op: red,
            root,
        },
        Scatter => AivKind::Scatter { root },
        Gather => AivKind::Gather { root },
        _ => return None,
    };
    Some(kind.max_publish_len(p, usize::try_from(block).ok()?) as u64)
}

/// The mesh plan's predicted µs for `q` (what the AIV and direct
/// executors replace, logged next to their score).
fn mesh_micros(q: &SelectQuery<'_>) -> f64 {
    terms(Algo::Mesh, q.op, q.ranks(), q.bytes).map_or(f64::INFINITY, |t| q.price(t))
}

/// The declaration of the `kind` executor for `op` whose inter-host
/// allreduce is `level1`: served on several hosts, each level priced with
/// its own link ([`predict_hier_op`]). Forced by no `HCCL_ALGO` value (the
/// built-in rows add theirs).
pub(crate) fn hier_info(
    kind: HierKind,
    op: OpType,
    level1: Arc<dyn Level1Algorithm>,
) -> ExecutorInfo {
    ExecutorInfo::new(&[op], move |q| {
        predict_hier_op(kind, q.op, level1.as_ref(), &q.host_sizes, q.bytes, q.cost)
            .map(Estimate::predicted)
    })
    .serving(|q| q.hosts() > 1)
}

impl Builtin {
    /// The row's declaration.
    fn info(&self) -> ExecutorInfo {
        let ops = [self.op];
        match self.decl {
            Flat(algo) => ExecutorInfo::new(&ops, move |q| {
                let t = predict(
                    algo,
                    q.op,
                    q.ranks(),
                    q.bytes,
                    q.flat_link(),
                    q.cost.gamma_us_per_byte,
                );
                Some(Estimate::predicted(t.unwrap_or(f64::INFINITY)))
            })
            .forced_by(AlgoTag::Flat(algo)),
            Aiv => ExecutorInfo::new(&ops, |q| {
                Some(Estimate::scored(Estimate::AIV_SCORE, mesh_micros(q)))
            })
            .serving(|q| {
                let payload = aiv_payload(q.op, q.ranks(), q.block_bytes);
                q.one_host_peers()
                    && matches!((payload, q.limits.aiv_max_bytes), (Some(b), Some(max)) if b <= max)
            })
            .noting("the payload per rank is within HCCL_RS_AIV_MAX_BYTES: one AIV kernel"),
            Direct => ExecutorInfo::new(&ops, |q| {
                Some(Estimate::scored(Estimate::DIRECT_SCORE, mesh_micros(q)))
            })
            .serving(|q| {
                // a direct Send holds the sender until the receiver has
                // read: only where graph mode asks for it
                let point_to_point = matches!(q.op, OpType::Send | OpType::Receive);
                q.one_host_peers()
                    && q.limits.direct_min_bytes.is_some_and(|min| q.bytes >= min)
                    && (q.limits.graph || !point_to_point)
            })
            .noting("at least HCCL_RS_DIRECT_MIN_BYTES: peers' buffers read directly"),
            Hier(kind, l1) => {
                let level1 = l1.get();
                let tag = AlgoTag::Hier(kind, level1.algo_name());
                hier_info(kind, self.op, level1).forced_by(tag)
            }
            MultiRing => ExecutorInfo::new(&ops, |q| {
                let rings = crate::rings::Rings::of(q.topo).ok()?;
                predict_multi_ring(q.op, &rings, &q.topo.rank_to_server, q.bytes, q.cost)
                    .map(|t| Estimate::scored(Estimate::PROVISIONAL_SCORE, t))
            })
            .serving(|q| q.hosts() > 1)
            .forced_by(AlgoTag::MultiRing)
            .noting("one ring per channel (nothing ranked above it serves the op)"),
        }
    }
}

/// A registered executor.
struct Entry {
    factory: ExecutorFactory,
    info: Option<ExecutorInfo>,
}

/// The registry's tables, under one lock.
#[derive(Default)]
struct Tables {
    /// Every executor by name.
    by_name: BTreeMap<String, Entry>,
    /// The declared executors in registration order (the ranking's tie
    /// order), shared with rankings in progress.
    declared: Arc<Vec<(Arc<str>, ExecutorInfo)>>,
    /// The executor each `HCCL_ALGO` value forces per op.
    forced: HashMap<(OpType, AlgoTag), Arc<str>>,
}

/// Executors by name (HCCL's `REGISTER_EXEC`), with their declarations.
pub struct ExecutorRegistry {
    tables: RwLock<Tables>,
    /// Bumped by every registration: a selector's memoised choices hold
    /// for one generation.
    generation: AtomicU64,
}

impl std::fmt::Debug for ExecutorRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecutorRegistry")
            .field("names", &self.names())
            .finish()
    }
}

impl ExecutorRegistry {
    /// An empty registry.
    pub fn empty() -> Self {
        ExecutorRegistry {
            tables: RwLock::new(Tables::default()),
            generation: AtomicU64::new(0),
        }
    }

    /// A registry holding every built-in executor (the rows of
    /// `BUILTINS` table, in order).
    pub fn with_builtins() -> Self {
        let r = Self::empty();
        for b in BUILTINS {
            let factory: ExecutorFactory = Arc::new(move |t: &TopoInfo| (b.make)(b, t));
            r.insert(b.name, factory, Some(b.info()))
                .expect("built-in names and HCCL_ALGO claims are unique");
        }
        r
    }

    /// Adds an executor under `name` that declares nothing: the selector
    /// never picks it; it runs only when forced by name
    /// (`HCCL_RS_EXECUTOR`). A name already taken is an internal error (as
    /// HCCL's registration), and the registry is left unchanged.
    pub fn register(&self, name: &str, factory: ExecutorFactory) -> Result<()> {
        self.insert(name, factory, None)
    }

    /// Adds an executor under `name` with its declaration: from then on
    /// the selector ranks it with the built-ins for every op and query it
    /// serves (see [`ExecutorInfo`]). A declaration that serves no op or
    /// gives a NaN or negative time ([`ExecutorInfo::validate`]) is
    /// `HCCL_E_PARA`; a name already taken, or an `HCCL_ALGO` value that
    /// already forces another executor for one of its ops, is
    /// `HCCL_E_INTERNAL`. On error the registry is left unchanged.
    pub fn register_with(
        &self,
        name: &str,
        factory: ExecutorFactory,
        info: ExecutorInfo,
    ) -> Result<()> {
        info.validate(name)?;
        self.insert(name, factory, Some(info))
    }

    /// The one way in: checks `name` and the `HCCL_ALGO` claims, then
    /// adds the entry to every table.
    fn insert(
        &self,
        name: &str,
        factory: ExecutorFactory,
        info: Option<ExecutorInfo>,
    ) -> Result<()> {
        if name.is_empty() {
            return Err(HcclError::para("executor name must not be empty"));
        }
        let mut t = self.tables.write().unwrap_or_else(|p| p.into_inner());
        if t.by_name.contains_key(name) {
            return Err(HcclError::internal(format!(
                "an executor named '{name}' is already registered"
            )));
        }
        let shared: Arc<str> = Arc::from(name);
        if let Some(info) = &info {
            if let Some(tag) = info.algo() {
                for &op in info.ops() {
                    if let Some(other) = t.forced.get(&(op, tag)) {
                        return Err(HcclError::internal(format!(
                            "executor '{name}' claims HCCL_ALGO {tag:?} for {op}, which already forces '{other}'"
                        )));
                    }
                }
                for &op in info.ops() {
                    t.forced.insert((op, tag), shared.clone());
                }
            }
            Arc::make_mut(&mut t.declared).push((shared.clone(), info.clone()));
        }
        t.by_name.insert(name.to_owned(), Entry { factory, info });
        self.generation.fetch_add(1, Ordering::Release);
        tracing::debug!(executor = name, "registered executor");
        Ok(())
    }

    /// Whether `name` is registered.
    pub fn contains(&self, name: &str) -> bool {
        self.tables
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .by_name
            .contains_key(name)
    }

    /// Every registered name, sorted.
    pub fn names(&self) -> Vec<String> {
        self.tables
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .by_name
            .keys()
            .cloned()
            .collect()
    }

    /// The declaration of `name` (`None` if unknown or declared nothing).
    pub fn info(&self, name: &str) -> Option<ExecutorInfo> {
        self.tables
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .by_name
            .get(name)?
            .info
            .clone()
    }

    /// The op executor `name` serves, from its declaration: the one op
    /// it declares, or, of several, the one its name starts with
    /// (`AllGatherVMeshExecutor`: AllGatherV, not AllGather). `None` for
    /// an unknown executor or one that declared nothing.
    pub fn op_of(&self, name: &str) -> Option<OpType> {
        let info = self.info(name)?;
        let ops = info.ops();
        if let [one] = ops {
            return Some(*one);
        }
        ops.iter()
            .copied()
            .filter(|op| name.starts_with(&format!("{op:?}")))
            .max_by_key(|op| format!("{op:?}").len())
            .or_else(|| ops.first().copied())
    }

    /// How many registrations the registry has seen: a choice worked out
    /// from its declarations holds while this stays the same.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The executor that the `HCCL_ALGO` value `tag` forces for `op`.
    pub fn forced(&self, op: OpType, tag: AlgoTag) -> Option<Arc<str>> {
        self.tables
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .forced
            .get(&(op, tag))
            .cloned()
    }

    /// Every declared executor that serves `q`, with its estimate, in
    /// registration order ([`super::decl::best`] picks the winner). An
    /// estimate with a NaN or negative time is left out (and logged).
    pub fn candidates(&self, q: &SelectQuery<'_>) -> Vec<Candidate> {
        // the declarations run outside the lock: one may look at the registry
        let declared = self
            .tables
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .declared
            .clone();
        declared
            .iter()
            .filter_map(|(name, info)| {
                let estimate = info.estimate(q)?;
                if !estimate.is_valid() {
                    tracing::warn!(executor = %name, op = %q.op, bytes = q.bytes, micros = estimate.micros, "executor declared an invalid cost; not a candidate");
                    return None;
                }
                Some(Candidate {
                    name: name.clone(),
                    estimate,
                    note: info.note(),
                })
            })
            .collect()
    }

    /// Builds the executor `name` for `topo`.
    pub fn create(&self, name: &str, topo: &TopoInfo) -> Result<Box<dyn CollExecutor>> {
        let factory = self
            .tables
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .by_name
            .get(name)
            .map(|e| e.factory.clone());
        let factory = factory.ok_or_else(|| {
            HcclError::not_found(format!(
                "no executor named '{name}' is registered (known: {})",
                self.names().join(", ")
            ))
        })?;
        Ok(factory(topo))
    }
}

/// The process-wide registry, created with the built-in executors.
pub fn registry() -> &'static ExecutorRegistry {
    static REGISTRY: OnceLock<ExecutorRegistry> = OnceLock::new();
    REGISTRY.get_or_init(ExecutorRegistry::with_builtins)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::CostParams;
    use crate::executor::decl::{best, model_bytes, ScoreRange, SelectLimits};
    use hccl_platform::HcclResult;

    fn ring(t: &TopoInfo) -> Box<dyn CollExecutor> {
        Box::new(crate::executor::AllReduceRingExecutor(
            crate::executor::Named::new("AllReduceRingExecutor", OpType::AllReduce, t),
        ))
    }

    #[test]
    fn duplicate_and_unknown_names() {
        let r = ExecutorRegistry::with_builtins();
        assert!(r.contains("AllReduceRingExecutor"));
        let f: ExecutorFactory = Arc::new(|t: &TopoInfo| {
            Box::new(crate::executor::AllReduceRingExecutor(
                crate::executor::Named::new("AllReduceRingExecutor", OpType::AllReduce, t),
            )) as Box<dyn CollExecutor>
        });
        let e = r.register("AllReduceRingExecutor", f.clone()).unwrap_err();
        assert_eq!(e.code(), hccl_platform::HcclResult::EInternal);
        assert!(e.to_string().contains("already registered"), "{e}");
        r.register("Mine", f).unwrap();
        let names = r.names();
        assert!(names.contains(&"Mine".to_string()));
        assert!(names.contains(&"BroadcastMeshExecutor".to_string()));
        assert!(names.windows(2).all(|w| w[0] < w[1]), "names are sorted");
        let topo = TopoInfo::single_server(0, 2).unwrap();
        let e = r.create("Nope", &topo).err().unwrap();
        assert_eq!(e.code(), hccl_platform::HcclResult::ENotFound);
        assert!(
            e.to_string().contains(
                "known: AllGatherDirectExecutor, AllGatherMeshAivExecutor, AllGatherMeshExecutor"
            ),
            "{e}"
        );
        assert_eq!(
            r.create("Mine", &topo).unwrap().name(),
            "AllReduceRingExecutor"
        );
    }

    /// The one table registers exactly the executors the executor modules
    /// list, each for its op and under its own name, and every row's
    /// declaration passes the checks a user's must pass.
    #[test]
    fn the_table_registers_every_listed_executor_with_a_valid_declaration() {
        use crate::executor as x;
        let mut listed: Vec<(String, OpType)> = [
            x::AIV_EXECUTORS,
            x::DIRECT_EXECUTORS,
            x::MESH_EXECUTORS,
            x::PAIRWISE_EXECUTORS,
            x::STAR_EXECUTORS,
            x::RING_ROOTED_EXECUTORS,
            x::RHD_EXECUTORS,
            x::NHR_EXECUTORS,
            x::NB_EXECUTORS,
            x::MULTI_RING_EXECUTORS,
        ]
        .iter()
        .flat_map(|t| t.iter().map(|&(n, op)| (n.to_owned(), op)))
        .chain(x::hier_executors().into_iter().map(|(n, op, _)| (n, op)))
        .collect();
        listed.extend([
            ("AllReduceRingExecutor".to_owned(), AllReduce),
            ("AllGatherRingExecutor".to_owned(), AllGather),
            ("ReduceScatterRingExecutor".to_owned(), ReduceScatter),
            ("BroadcastRingExecutor".to_owned(), Broadcast),
            ("AllReduceRHDExecutor".to_owned(), AllReduce),
        ]);
        let r = ExecutorRegistry::with_builtins();
        assert_eq!(r.names().len(), listed.len());
        assert_eq!(BUILTINS.len(), listed.len());
        let topo = TopoInfo::new(0, vec![0, 0, 1, 1]).unwrap();
        for (name, op) in &listed {
            let info = r
                .info(name)
                .unwrap_or_else(|| panic!("{name} declares nothing"));
            assert_eq!(info.ops(), &[*op], "{name}");
            info.validate(name).unwrap();
            assert_eq!(r.create(name, &topo).unwrap().name(), name);
        }
    }

    /// The AIV rows' payload is what the AIV executors compute from an op
    /// param, whatever the data type and root.
    #[test]
    fn aiv_payload_matches_the_executors() {
        use hccl_platform::{DataType, Device, DeviceConfig, DeviceMem, ReduceOp, Stream};
        let device = Device::new(0, DeviceConfig::default());
        for &(_, op) in crate::executor::AIV_EXECUTORS {
            for (count, dtype, root) in [(1u64, DataType::Int8, 0u32), (1000, DataType::Fp32, 2)] {
                for p in [2u32, 5] {
                    let param = crate::OpParam::new(
                        "t",
                        op,
                        Stream::new(&device),
                        DeviceMem::null(),
                        DeviceMem::null(),
                        count,
                        dtype,
                        ReduceOp::Max,
                        root.min(p - 1),
                    );
                    assert_eq!(
                        aiv_payload(op, p, param.input_bytes()),
                        crate::executor::aiv_payload_bytes(&param, p),
                        "{op} p={p}"
                    );
                }
            }
        }
        assert_eq!(aiv_payload(AllToAllV, 2, 8), None);
    }

    fn query(op: OpType, topo: &TopoInfo, bytes: u64) -> Vec<Candidate> {
        let r = registry();
        let cost = CostParams::default();
        r.candidates(&SelectQuery::new(
            op,
            topo,
            bytes,
            &cost,
            SelectLimits::default(),
        ))
    }

    /// The multi-ring executors are candidates on several hosts, with the
    /// cost model's prediction, but rank after every cost-model
    /// prediction: measured, they were not faster (docs/performance.md).
    /// By the model alone they would win large Broadcast and Reduce.
    #[test]
    fn multi_ring_is_a_candidate_across_hosts_but_not_a_default() {
        let cost = CostParams::default();
        for map in [
            vec![0, 0, 1, 1],
            vec![0, 0, 0, 0, 1, 1, 1, 1],
            vec![0, 0, 1, 2, 2],
        ] {
            let topo = TopoInfo::new(0, map.clone()).unwrap();
            for op in [AllReduce, AllGather, ReduceScatter, Broadcast, Reduce] {
                for block in [1u64 << 10, 1 << 20, 64 << 20] {
                    let bytes = model_bytes(op, block, topo.user_rank_size);
                    let q = SelectQuery::new(op, &topo, bytes, &cost, SelectLimits::default());
                    let c = registry().candidates(&q);
                    let mr = c
                        .iter()
                        .find(|c| c.name.ends_with("MultiRingExecutor"))
                        .unwrap_or_else(|| panic!("{op} on {map:?}: no multi-ring candidate"));
                    assert_eq!(mr.estimate.score, Estimate::PROVISIONAL_SCORE);
                    assert!(mr.estimate.micros.is_finite() && mr.estimate.micros > 0.0);
                    let won = &c[best(&c).unwrap()].name;
                    assert!(
                        !won.ends_with("MultiRingExecutor"),
                        "{op} {block} on {map:?}"
                    );
                }
            }
        }
        // the model's own opinion: a 64 MiB broadcast on 2 + 2 ranks
        let topo = TopoInfo::new(0, vec![0, 0, 1, 1]).unwrap();
        let q = SelectQuery::new(Broadcast, &topo, 64 << 20, &cost, SelectLimits::default());
        let c = registry().candidates(&q);
        let fastest = c
            .iter()
            .min_by(|a, b| a.estimate.micros.total_cmp(&b.estimate.micros))
            .unwrap();
        assert_eq!(&*fastest.name, "BroadcastMultiRingExecutor");
        // one host: not a candidate (forced, it still runs: tests/tests/multi_ring.rs)
        let one = TopoInfo::single_server(0, 4).unwrap();
        let q = SelectQuery::new(AllReduce, &one, 1 << 20, &cost, SelectLimits::default());
        assert!(registry()
            .candidates(&q)
            .iter()
            .all(|c| !c.name.contains("MultiRing")));
    }

    /// Declarations that cannot be ranked are refused with `HCCL_E_PARA`
    /// naming the problem, and leave the registry unchanged.
    #[test]
    fn bad_declarations_are_rejected() {
        let r = ExecutorRegistry::with_builtins();
        let generation = r.generation();
        let cases: Vec<(ExecutorInfo, &str)> = vec![
            (
                ExecutorInfo::new(&[], |_| Some(Estimate::predicted(1.0))),
                "serves no op",
            ),
            (
                ExecutorInfo::new(&[AllReduce], |_| Some(Estimate::predicted(f64::NAN))),
                "a cost of NaN µs",
            ),
            (
                ExecutorInfo::from_terms(&[AllReduce], |q| {
                    (q.bytes > 1000).then_some((1.0, -(q.bytes as f64), 0.0))
                }),
                "a cost of -",
            ),
            (
                ExecutorInfo::from_scores(&[Broadcast], &[]),
                "serves no message size",
            ),
            (
                ExecutorInfo::from_scores(
                    &[Broadcast],
                    &[ScoreRange {
                        min_bytes: 10,
                        max_bytes: 1,
                        score: 50,
                    }],
                ),
                "score range 10..=1 bytes is empty",
            ),
        ];
        for (info, why) in cases {
            let e = r.register_with("Bad", Arc::new(ring), info).unwrap_err();
            assert_eq!(e.code(), HcclResult::EPara, "{e}");
            assert!(e.to_string().contains("executor 'Bad'"), "{e}");
            assert!(e.to_string().contains(why), "{why}: {e}");
            assert!(!r.contains("Bad"));
        }
        assert_eq!(r.generation(), generation);
        // an HCCL_ALGO value forces one executor per op
        let claim = ExecutorInfo::new(&[AllReduce], |_| None).forced_by(AlgoTag::Flat(Algo::Ring));
        let e = r
            .register_with("Claims", Arc::new(ring), claim)
            .unwrap_err();
        assert_eq!(e.code(), HcclResult::EInternal);
        assert!(
            e.to_string()
                .contains("already forces 'AllReduceRingExecutor'"),
            "{e}"
        );
        assert!(!r.contains("Claims"));
        // a cost that goes bad outside the checked grid is left out of the ranking
        let odd = ExecutorInfo::new(&[AllReduce], |q| {
            Some(Estimate::predicted(if q.bytes == 12345 {
                -1.0
            } else {
                0.0
            }))
        });
        r.register_with("Odd", Arc::new(ring), odd).unwrap();
        let topo = TopoInfo::single_server(0, 4).unwrap();
        let cost = CostParams::default();
        let q = |b| SelectQuery::new(AllReduce, &topo, b, &cost, SelectLimits::default());
        assert!(r.candidates(&q(12345)).iter().all(|c| &*c.name != "Odd"));
        let c = r.candidates(&q(64));
        assert_eq!(&*c[best(&c).unwrap()].name, "Odd");
    }

    /// An executor registered without a declaration is never a candidate;
    /// the same executor with one is, where it serves.
    #[test]
    fn undeclared_executors_are_never_candidates() {
        let r = ExecutorRegistry::with_builtins();
        r.register("Plain", Arc::new(ring)).unwrap();
        let free = ExecutorInfo::new(&[AllReduce], |_| Some(Estimate::predicted(0.0)))
            .serving(|q| q.ranks() == 3);
        r.register_with("Declared", Arc::new(ring), free).unwrap();
        assert!(r.info("Plain").is_none());
        let cost = CostParams::default();
        for map in [vec![0, 0], vec![0, 0, 0], vec![0, 0, 1, 1]] {
            let topo = TopoInfo::new(0, map).unwrap();
            for op in [AllReduce, AllGather, Broadcast, AllToAllV, OpType::Send] {
                for (block, offered) in [0u64, 8, 1 << 20]
                    .into_iter()
                    .flat_map(|b| [(b, false), (b, true)])
                {
                    let bytes = model_bytes(op, block, topo.user_rank_size);
                    let limits = SelectLimits {
                        aiv_max_bytes: offered.then_some(1 << 14),
                        direct_min_bytes: offered.then_some(1 << 18),
                        graph: false,
                    };
                    let c = r.candidates(&SelectQuery::new(op, &topo, bytes, &cost, limits));
                    assert!(!c.is_empty(), "{op} on {:?}", topo.rank_to_server);
                    assert!(c.iter().all(|c| &*c.name != "Plain"));
                    let declared = c.iter().any(|c| &*c.name == "Declared");
                    assert_eq!(declared, op == AllReduce && topo.user_rank_size == 3);
                    // the cost model's score: AIV and direct read outrank it
                    if declared && !offered {
                        assert_eq!(&*c[best(&c).unwrap()].name, "Declared");
                    }
                }
            }
        }
    }

    /// The ranking: a higher score beats any time; among equal scores the
    /// lower time; among equal times the earlier registration (Star after
    /// Mesh, NB after NHR).
    #[test]
    fn ranking_order() {
        let topo = TopoInfo::single_server(0, 8).unwrap();
        let c = query(Broadcast, &topo, 4);
        let names: Vec<&str> = c.iter().map(|c| &*c.name).collect();
        let at = |n: &str| names.iter().position(|&m| m == n).unwrap();
        assert!(at("BroadcastMeshExecutor") < at("BroadcastStarExecutor"));
        assert!(at("BroadcastNHRExecutor") < at("BroadcastNBExecutor"));
        let star = &c[at("BroadcastStarExecutor")].estimate;
        assert_eq!(c[at("BroadcastMeshExecutor")].estimate, *star);
        assert_eq!(&*c[best(&c).unwrap()].name, "BroadcastMeshExecutor");
        let hi = Estimate::scored(Estimate::DIRECT_SCORE, 1e9);
        assert!(hi.beats(&Estimate::predicted(0.0)));
        assert!(!Estimate::predicted(1.0).beats(&Estimate::predicted(1.0)));
        assert!(best(&[]).is_none());
    }
}
