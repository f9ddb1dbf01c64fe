//! The executor registry: executors by name, extensible at run time.

use super::{
    AllGatherRingExecutor, AllReduceRingExecutor, CollExecutor, MeshExecutor,
    ReduceScatterRingExecutor, MESH_EXECUTORS,
};
use crate::op::OpType;
use crate::topo::TopoInfo;
use hccl_platform::{HcclError, Result};
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock, RwLock};

/// Builds an executor for a communicator's topology.
pub type ExecutorFactory = Arc<dyn Fn(&TopoInfo) -> Box<dyn CollExecutor> + Send + Sync>;

/// Executors by name (HCCL's `REGISTER_EXEC`).
pub struct ExecutorRegistry {
    map: RwLock<BTreeMap<String, ExecutorFactory>>,
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
            map: RwLock::new(BTreeMap::new()),
        }
    }

    /// A registry holding every built-in executor.
    pub fn with_builtins() -> Self {
        let r = Self::empty();
        let builtins: Vec<(&str, ExecutorFactory)> = vec![
            (
                super::BroadcastRingExecutor::NAME,
                Arc::new(|t: &TopoInfo| {
                    Box::new(super::BroadcastRingExecutor::new(t)) as Box<dyn CollExecutor>
                }),
            ),
            (
                super::AllReduceRhdExecutor::NAME,
                Arc::new(|t: &TopoInfo| {
                    Box::new(super::AllReduceRhdExecutor::new(t)) as Box<dyn CollExecutor>
                }),
            ),
            (
                AllReduceRingExecutor::NAME,
                Arc::new(|t: &TopoInfo| {
                    Box::new(AllReduceRingExecutor::new(t)) as Box<dyn CollExecutor>
                }),
            ),
            (
                AllGatherRingExecutor::NAME,
                Arc::new(|t: &TopoInfo| {
                    Box::new(AllGatherRingExecutor::new(t)) as Box<dyn CollExecutor>
                }),
            ),
            (
                ReduceScatterRingExecutor::NAME,
                Arc::new(|t: &TopoInfo| {
                    Box::new(ReduceScatterRingExecutor::new(t)) as Box<dyn CollExecutor>
                }),
            ),
        ];
        for (name, f) in builtins {
            r.register(name, f).expect("built-in names are unique");
        }
        // table-driven executors: one type serving several ops
        type Make = fn(&'static str, OpType, &TopoInfo) -> Box<dyn CollExecutor>;
        let tables: [(&[(&'static str, OpType)], Make); 9] = [
            (super::AIV_EXECUTORS, |n, op, t| {
                Box::new(super::AivExecutor::new(n, op, t))
            }),
            (super::DIRECT_EXECUTORS, |n, op, t| {
                Box::new(super::DirectExecutor::new(n, op, t))
            }),
            (super::PAIRWISE_EXECUTORS, |n, op, t| {
                Box::new(MeshExecutor::pairwise(n, op, t))
            }),
            (super::STAR_EXECUTORS, |n, op, t| {
                Box::new(MeshExecutor::star(n, op, t))
            }),
            (super::RING_ROOTED_EXECUTORS, |n, op, t| {
                Box::new(super::RingRootedExecutor::new(n, op, t))
            }),
            (super::RHD_EXECUTORS, |n, op, t| {
                Box::new(super::RhdExecutor::new(n, op, t))
            }),
            (super::NHR_EXECUTORS, |n, op, t| {
                Box::new(super::NonuniformExecutor::nhr(n, op, t))
            }),
            (super::NB_EXECUTORS, |n, op, t| {
                Box::new(super::NonuniformExecutor::nb(n, op, t))
            }),
            (MESH_EXECUTORS, |n, op, t| {
                Box::new(MeshExecutor::new(n, op, t))
            }),
        ];
        for (table, make) in tables {
            for &(name, op) in table {
                r.register(name, Arc::new(move |t: &TopoInfo| make(name, op, t)))
                    .expect("built-in names are unique");
            }
        }
        super::hier::register_builtins(&r).expect("built-in names are unique");
        r
    }

    /// Adds an executor under `name`. A name already taken is an internal
    /// error (as HCCL's registration), and the registry is left unchanged.
    pub fn register(&self, name: &str, factory: ExecutorFactory) -> Result<()> {
        if name.is_empty() {
            return Err(HcclError::para("executor name must not be empty"));
        }
        let mut map = self.map.write().unwrap_or_else(|p| p.into_inner());
        if map.contains_key(name) {
            return Err(HcclError::internal(format!(
                "an executor named '{name}' is already registered"
            )));
        }
        map.insert(name.to_owned(), factory);
        tracing::debug!(executor = name, "registered executor");
        Ok(())
    }

    /// Whether `name` is registered.
    pub fn contains(&self, name: &str) -> bool {
        self.map
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(name)
    }

    /// Every registered name, sorted.
    pub fn names(&self) -> Vec<String> {
        self.map
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    /// Builds the executor `name` for `topo`.
    pub fn create(&self, name: &str, topo: &TopoInfo) -> Result<Box<dyn CollExecutor>> {
        let factory = self
            .map
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
            .ok_or_else(|| {
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

    #[test]
    fn duplicate_and_unknown_names() {
        let r = ExecutorRegistry::with_builtins();
        assert!(r.contains("AllReduceRingExecutor"));
        let f: ExecutorFactory = Arc::new(|t: &TopoInfo| {
            Box::new(AllReduceRingExecutor::new(t)) as Box<dyn CollExecutor>
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
}
