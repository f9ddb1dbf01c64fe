//! Opening a rank's transport components: which ones (the user's order),
//! with what scores (defaults, then tune strings), and what to do when one
//! cannot open (an error if the user named it, a quiet skip under `auto`).

use crate::fabric::Opened;
use hccl_platform::transport::{
    transports, ContextSetup, ScoreMap, Transport, TransportOrder, TransportParams,
};
use hccl_platform::{HcclError, Result};
use std::sync::Arc;

/// Variables of the transport components that are passed through to
/// them (besides the tune strings).
const COMPONENT_VARS: &[&str] = &[
    "HCCL_RS_IB_HCA",
    "HCCL_RS_IB_GID_INDEX",
    "HCCL_RS_IB_TIMEOUT",
    "HCCL_RS_IB_RETRY_CNT",
    "HCCL_RS_TCP_LINK_TIMEOUT_MS",
    // a component that would change how drivers wait leaves a user's
    // explicit choice alone
    "HCCL_RS_SPIN_US",
];

/// The names of the registered components.
fn names() -> Vec<&'static str> {
    transports().iter().map(|t| t.name()).collect()
}

/// `HCCL_RS_TRANSPORT`'s value as an order, checked against the
/// registered components.
pub(crate) fn order_of(value: &str) -> Result<TransportOrder> {
    TransportOrder::parse(value, &names())
}

/// The tune-string variable of a component: `HCCL_RS_TL_<NAME>_TUNE`,
/// the name upper-cased with `-` as `_`.
pub(crate) fn tune_var(name: &str) -> String {
    format!(
        "HCCL_RS_TL_{}_TUNE",
        name.to_ascii_uppercase().replace('-', "_")
    )
}

/// The transport settings of `env`: every registered component's tune
/// string (checked now, so a typo fails at start-up) and the components'
/// own variables.
pub(crate) fn params_from(get: &dyn Fn(&str) -> Option<String>) -> Result<TransportParams> {
    let mut params = TransportParams::default();
    for t in transports() {
        let var = tune_var(t.name());
        if let Some(v) = get(&var) {
            t.default_scores().tune(&v, &var)?;
            params.0.push((var, v));
        }
    }
    for var in COMPONENT_VARS {
        if let Some(v) = get(var) {
            params.0.push(((*var).to_owned(), v));
        }
    }
    Ok(params)
}

/// A component's scores: its defaults with the user's tune string laid
/// over them.
fn scores_of(t: &dyn Transport, params: &TransportParams) -> Result<ScoreMap> {
    let mut scores = t.default_scores();
    let var = tune_var(t.name());
    if let Some(spec) = params.get(&var) {
        scores.tune(spec, &var)?;
    }
    Ok(scores)
}

/// Opens every component the user's order (`transport`, as
/// `HCCL_RS_TRANSPORT` says it) allows for the rank `setup` describes, and
/// attaches their park hooks to its device. A component the user listed
/// by name that cannot open is an error naming it; under `auto` it is
/// skipped (logged at debug level).
pub(crate) fn open_all(setup: &ContextSetup, transport: &str) -> Result<Vec<Opened>> {
    let order = order_of(transport)?;
    let mut opened = Vec::new();
    for t in transports() {
        if !order.allows(t.name()) {
            continue;
        }
        let explicit = order.is_explicit(t.name());
        let scores = scores_of(t.as_ref(), &setup.params)?;
        match t.open(setup, explicit) {
            Ok(Some(context)) => {
                if let Some(hook) = context.park_hook() {
                    setup.device.add_park_hook(&hook);
                }
                opened.push(Opened {
                    component: t.clone(),
                    context,
                    scores,
                });
            }
            Ok(None) => {
                tracing::debug!(
                    rank = setup.rank,
                    transport = t.name(),
                    "transport not available here"
                );
            }
            Err(e) if explicit => {
                return Err(e.rank(setup.rank).during(format!(
                    "opening transport {} (HCCL_RS_TRANSPORT)",
                    t.name()
                )))
            }
            Err(e) => {
                tracing::debug!(
                    rank = setup.rank,
                    transport = t.name(),
                    error = %e,
                    "transport could not open; skipped (HCCL_RS_TRANSPORT=auto)"
                );
            }
        }
    }
    if opened.is_empty() {
        return Err(HcclError::not_support(format!(
            "no transport could be opened (HCCL_RS_TRANSPORT={transport})"
        ))
        .rank(setup.rank));
    }
    Ok(opened)
}

/// Opens only the in-process component (ranks that are threads of one
/// group reach each other through it and nothing else).
pub(crate) fn open_in_process(setup: &ContextSetup) -> Result<Vec<Opened>> {
    let t: Arc<dyn Transport> = hccl_platform::transport::find_transport("in-process")
        .ok_or_else(|| HcclError::internal("the in-process transport is not registered"))?;
    let context = t
        .open(setup, true)?
        .ok_or_else(|| HcclError::internal("the in-process transport did not open"))?;
    Ok(vec![Opened {
        scores: scores_of(t.as_ref(), &setup.params)?,
        component: t,
        context,
    }])
}
