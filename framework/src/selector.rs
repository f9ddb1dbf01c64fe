//! Algorithm selection: which executor runs an op.

use hccl_algorithm::executor::AllReduceRingExecutor;
use hccl_algorithm::{ExecutorRegistry, OpParam, OpType, TopoInfo};
use hccl_platform::{HcclError, Result};

/// Picks an executor name for an op. The framework only ever handles names;
/// the registry turns them into executors.
#[derive(Clone, Debug, Default)]
pub struct Selector {
    override_name: Option<String>,
}

impl Selector {
    /// A selector; `override_name` (from `HCCL_RS_EXECUTOR` or the config)
    /// forces one executor for every op.
    pub fn new(override_name: Option<String>) -> Self {
        Selector { override_name }
    }

    /// The executor name for `param` on `topo`, checked against `registry`.
    pub fn select(
        &self,
        param: &OpParam,
        topo: &TopoInfo,
        registry: &ExecutorRegistry,
    ) -> Result<String> {
        let name = match &self.override_name {
            Some(n) => n.clone(),
            None => match param.op_type {
                OpType::AllReduce => AllReduceRingExecutor::NAME.to_owned(),
                other => {
                    return Err(HcclError::not_support(format!(
                        "no executor for {other} is available yet"
                    )))
                }
            },
        };
        if !registry.contains(&name) {
            return Err(HcclError::not_found(format!(
                "selected executor '{name}' is not registered (known: {})",
                registry.names().join(", ")
            )));
        }
        tracing::debug!(
            tag = %param.tag,
            op = %param.op_type,
            ranks = topo.user_rank_size,
            bytes = param.input_bytes(),
            executor = %name,
            forced = self.override_name.is_some(),
            "selected executor"
        );
        Ok(name)
    }
}
