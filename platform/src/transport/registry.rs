//! The table of transport components: the built-ins, then whatever user
//! crates register at run time (as the executor registry works).

use super::Transport;
use crate::error::{HcclError, Result};
use std::sync::{Arc, OnceLock, RwLock};

/// The built-in components, in the order ties are broken.
fn builtins() -> Vec<Arc<dyn Transport>> {
    let mut v: Vec<Arc<dyn Transport>> = vec![
        Arc::new(crate::link::InProcTransport),
        Arc::new(crate::link::ShmTransport),
    ];
    #[cfg(feature = "ibverbs")]
    v.push(Arc::new(crate::link::IbvTransport));
    v.push(Arc::new(crate::link::TcpTransport));
    v
}

fn table() -> &'static RwLock<Vec<Arc<dyn Transport>>> {
    static TABLE: OnceLock<RwLock<Vec<Arc<dyn Transport>>>> = OnceLock::new();
    TABLE.get_or_init(|| RwLock::new(builtins()))
}

/// Every registered component: the built-ins, then those registered with
/// [`register_transport`] in the order they were.
pub fn transports() -> Vec<Arc<dyn Transport>> {
    table().read().unwrap_or_else(|p| p.into_inner()).clone()
}

/// The component called `name`.
pub fn find_transport(name: &str) -> Option<Arc<dyn Transport>> {
    transports().into_iter().find(|t| t.name() == name)
}

/// Adds a component for every communicator created from now on in this
/// process. Every process of a communicator must register it (the
/// components a rank offers travel with its address; a peer without it
/// simply is not reached over it). A name already taken is an error.
pub fn register_transport(component: Arc<dyn Transport>) -> Result<()> {
    let name = component.name();
    if name.is_empty() || name.contains(',') || name.contains(char::is_whitespace) {
        return Err(HcclError::para(format!(
            "transport name '{name}' must be non-empty, without commas or spaces"
        )));
    }
    let mut t = table().write().unwrap_or_else(|p| p.into_inner());
    if t.iter().any(|c| c.name() == name) {
        return Err(HcclError::para(format!(
            "a transport named '{name}' is already registered"
        )));
    }
    tracing::debug!(transport = name, "transport component registered");
    t.push(component);
    Ok(())
}
