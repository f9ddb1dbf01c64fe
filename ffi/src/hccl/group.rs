//! Group calls (`hccl_comm.h`): `HcclGroupStart`, `HcclGroupEnd`,
//! `HcclGroupStatusGet` over the adapter's groups (see
//! `hccl_adapter::group_start`): HCCL calls a thread issues between a
//! start and the matching end are checked when issued and launched
//! together at the end (send/receive pairs batched so they cannot
//! deadlock, small AllReduces fused).

use crate::guard::{hccl, non_null};
use crate::types::HcclResult;

/// `HcclGroupStart`.
#[no_mangle]
pub extern "C" fn HcclGroupStart() -> HcclResult {
    hccl("HcclGroupStart", || {
        hccl_adapter::group_start();
        Ok(())
    })
}

/// `HcclGroupEnd`.
#[no_mangle]
pub extern "C" fn HcclGroupEnd() -> HcclResult {
    hccl("HcclGroupEnd", hccl_adapter::group_end)
}

/// `HcclGroupStatusGet`: whether the calling thread is inside a group.
#[no_mangle]
pub extern "C" fn HcclGroupStatusGet(inGroup: *mut bool) -> HcclResult {
    hccl("HcclGroupStatusGet", || {
        non_null(inGroup.cast_const(), "inGroup")?;
        // SAFETY: `inGroup` is non-null (checked) and, by the API's
        // contract, points to a writable bool.
        unsafe { inGroup.write(hccl_adapter::group_status()) };
        Ok(())
    })
}
