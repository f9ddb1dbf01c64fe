//! Device and stream modes: `aclrtSetDeviceSatMode` and
//! `aclrtSetStreamFailureMode`.
//!
//! Host FPUs follow IEEE 754: an overflow gives INF/NaN, never a saturated
//! value, so `ACL_RT_OVERFLOW_MODE_INFNAN` is accepted (and is what
//! happens) and `ACL_RT_OVERFLOW_MODE_SATURATION` is refused with
//! `ACL_ERROR_FEATURE_UNSUPPORTED`. A stream here always stops at its
//! first failed task (later tasks are discarded, synchronizing reports
//! the failure): both failure modes are accepted and recorded, and
//! `ACL_CONTINUE_ON_FAILURE` is logged as not honoured.

use super::current_device;
use super::stream::lookup;
use crate::guard::{acl, acl_err};
use crate::types::*;
use std::collections::HashMap;
use std::sync::Mutex;

/// The overflow mode set per ACL device.
static SAT_MODE: Mutex<Option<HashMap<i32, aclrtFloatOverflowMode>>> = Mutex::new(None);
/// The failure mode set per stream handle.
static FAILURE_MODE: Mutex<Option<HashMap<usize, u64>>> = Mutex::new(None);

/// `aclrtSetDeviceSatMode` for the calling thread's device.
#[no_mangle]
pub extern "C" fn aclrtSetDeviceSatMode(mode: aclrtFloatOverflowMode) -> aclError {
    acl("aclrtSetDeviceSatMode", || {
        match mode {
            ACL_RT_OVERFLOW_MODE_INFNAN => {}
            ACL_RT_OVERFLOW_MODE_SATURATION => {
                return Err(acl_err(
                    ACL_ERROR_FEATURE_UNSUPPORTED,
                    "ACL_RT_OVERFLOW_MODE_SATURATION: host CPUs overflow to INF/NaN (IEEE 754), \
                     they cannot saturate",
                ))
            }
            m => {
                return Err(acl_err(
                    ACL_ERROR_INVALID_PARAM,
                    format!("mode {m} is not ACL_RT_OVERFLOW_MODE_SATURATION (0) or _INFNAN (1)"),
                ))
            }
        }
        SAT_MODE
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert_with(HashMap::new)
            .insert(current_device(), mode);
        Ok(())
    })
}

/// `aclrtSetStreamFailureMode`: `ACL_CONTINUE_ON_FAILURE` (0) or
/// `ACL_STOP_ON_FAILURE` (1), recorded; streams stop at a failure either way.
#[no_mangle]
pub extern "C" fn aclrtSetStreamFailureMode(stream: aclrtStream, mode: u64) -> aclError {
    acl("aclrtSetStreamFailureMode", || {
        lookup(stream).map_err(|e| acl_err(ACL_ERROR_INVALID_RESOURCE_HANDLE, e.to_string()))?;
        match mode {
            ACL_STOP_ON_FAILURE => {}
            ACL_CONTINUE_ON_FAILURE => tracing::info!(
                target: "hccl::acl",
                "ACL_CONTINUE_ON_FAILURE recorded: a stream here stops at its first failed task"
            ),
            m => {
                return Err(acl_err(
                    ACL_ERROR_INVALID_PARAM,
                    format!(
                        "mode {m} is not ACL_CONTINUE_ON_FAILURE (0) or ACL_STOP_ON_FAILURE (1)"
                    ),
                ))
            }
        }
        FAILURE_MODE
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert_with(HashMap::new)
            .insert(stream as usize, mode);
        Ok(())
    })
}
