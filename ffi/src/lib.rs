//! hccl-ffi: the C ABI of hccl-rs (libhccl), with HCCL's names.
//!
//! This first cut exports the error-string query; the full `hccl.h` surface
//! (communicator creation and every collective) lands with the C ABI work.

use hccl_adapter::HcclResult;
use std::ffi::c_char;

/// HCCL's `HcclGetErrorString`: a static, NUL-terminated description of a
/// result code; unknown codes give `"unknown error"`.
#[no_mangle]
pub extern "C" fn HcclGetErrorString(code: u32) -> *const c_char {
    HcclResult::from_code(code)
        .map_or(c"unknown error", HcclResult::as_cstr)
        .as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hccl_adapter::HcclError;
    use std::ffi::CStr;

    #[test]
    fn strings_match_the_rust_error_codes() {
        for code in 1..=22u32 {
            // SAFETY: HcclGetErrorString returns a static NUL-terminated string.
            let s = unsafe { CStr::from_ptr(HcclGetErrorString(code)) }
                .to_str()
                .unwrap();
            let e = HcclError::from_code(HcclResult::from_code(code).unwrap(), "x");
            assert_eq!(e.code().code(), code);
            assert_eq!(s, e.code().as_str());
        }
        // SAFETY: as above.
        let s = unsafe { CStr::from_ptr(HcclGetErrorString(0)) };
        assert_eq!(s.to_str().unwrap(), "no error");
        // SAFETY: as above.
        let s = unsafe { CStr::from_ptr(HcclGetErrorString(99)) };
        assert_eq!(s.to_str().unwrap(), "unknown error");
        assert_eq!(
            HcclResult::ESuspending.as_str(),
            "error communication suspending"
        );
    }
}
