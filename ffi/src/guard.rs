//! The boundary: every exported function runs its body through [`hccl`] or
//! [`acl`], which catch panics, log failures and turn them into codes.

use hccl_adapter::HcclError;
use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;

thread_local! {
    static LAST_ERROR: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// The message of the last failed C call on this thread (HCCL reports
/// only codes; the text is logged and kept here for callers in Rust).
pub fn last_error_message() -> Option<String> {
    LAST_ERROR.with(|l| l.borrow().clone())
}

fn remember(msg: String) {
    LAST_ERROR.with(|l| *l.borrow_mut() = Some(msg));
}

/// C programs install no tracing subscriber: install one writing to stderr,
/// filtered by `HCCL_RS_LOG` (default `warn`), unless the host already has one.
fn init_logging() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let filter = tracing_subscriber::EnvFilter::try_from_env("HCCL_RS_LOG")
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .try_init();
    });
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

/// Runs an HCCL entry point: `Ok` → `HCCL_SUCCESS`, `Err(e)` → its code,
/// a panic → `HCCL_E_INTERNAL`.
pub(crate) fn hccl(api: &'static str, f: impl FnOnce() -> hccl_adapter::Result<()>) -> u32 {
    init_logging();
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            let e: HcclError = e;
            tracing::warn!(target: "hccl", api, code = e.code().code(), "{e}");
            remember(format!("{api}: {e}"));
            e.code().code()
        }
        Err(p) => {
            let msg = panic_text(&*p);
            tracing::error!(target: "hccl", api, "internal error (panic caught at the C boundary): {msg}");
            remember(format!("{api}: internal error: {msg}"));
            hccl_adapter::HcclResult::EInternal.code()
        }
    }
}

/// An ACL failure: the code and what went wrong.
#[derive(Debug)]
pub(crate) struct AclFail {
    pub code: i32,
    pub message: String,
}

/// Shorthand for an [`AclFail`].
pub(crate) fn acl_err(code: i32, message: impl Into<String>) -> AclFail {
    AclFail {
        code,
        message: message.into(),
    }
}

impl From<HcclError> for AclFail {
    fn from(e: HcclError) -> Self {
        use hccl_adapter::HcclResult as R;
        let code = match e.code() {
            R::EPara | R::EPtr => crate::types::ACL_ERROR_INVALID_PARAM,
            R::EMemory => crate::types::ACL_ERROR_BAD_ALLOC,
            _ => crate::types::ACL_ERROR_RT_FAILURE,
        };
        acl_err(code, e.to_string())
    }
}

/// Runs an ACL entry point like [`hccl`], with ACL's codes.
pub(crate) fn acl(api: &'static str, f: impl FnOnce() -> Result<(), AclFail>) -> i32 {
    init_logging();
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            tracing::warn!(target: "hccl::acl", api, code = e.code, "{}", e.message);
            remember(format!("{api}: {}", e.message));
            e.code
        }
        Err(p) => {
            let msg = panic_text(&*p);
            tracing::error!(target: "hccl::acl", api, "internal error (panic caught at the C boundary): {msg}");
            remember(format!("{api}: internal error: {msg}"));
            crate::types::ACL_ERROR_INTERNAL_ERROR
        }
    }
}

/// A required output/input pointer: null → `HCCL_E_PTR` naming it.
pub(crate) fn non_null<T>(p: *const T, what: &str) -> hccl_adapter::Result<()> {
    if p.is_null() {
        Err(HcclError::ptr(format!("{what} is null")))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_e_internal_with_its_message_kept() {
        let code = hccl("HcclTest", || panic!("boom at the boundary"));
        assert_eq!(code, hccl_adapter::HcclResult::EInternal.code());
        let msg = last_error_message().unwrap();
        assert!(
            msg.contains("HcclTest") && msg.contains("boom at the boundary"),
            "{msg}"
        );
        let code = acl("aclTest", || panic!("{}", String::from("owned panic")));
        assert_eq!(code, crate::types::ACL_ERROR_INTERNAL_ERROR);
        assert!(last_error_message().unwrap().contains("owned panic"));
    }

    #[test]
    fn errors_keep_their_code_and_message() {
        let code = hccl("HcclTest", || Err(HcclError::timeout("peer 3 went quiet")));
        assert_eq!(code, 9);
        assert_eq!(
            last_error_message().unwrap(),
            "HcclTest: timeout: peer 3 went quiet"
        );
        assert_eq!(hccl("HcclTest", || Ok(())), 0);
    }
}
