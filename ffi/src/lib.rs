//! hccl-ffi: the C ABI of hccl-rs (libhccl), with HCCL's names.
//!
//! This first cut exports the error-string query; the full `hccl.h` surface
//! (communicator creation and every collective) lands with the C ABI work.

use std::ffi::c_char;

/// HCCL's `HcclGetErrorString`: a static, NUL-terminated description of a
/// result code; unknown codes give `"unknown error"`.
#[no_mangle]
pub extern "C" fn HcclGetErrorString(code: u32) -> *const c_char {
    let s: &'static [u8] = match code {
        0 => b"no error\0",
        1 => b"parameter error\0",
        2 => b"empty pointer\0",
        3 => b"memory error\0",
        4 => b"internal error\0",
        5 => b"not support feature\0",
        6 => b"not found specific resource\0",
        7 => b"resource unavailable\0",
        8 => b"call system interface error\0",
        9 => b"timeout\0",
        10 => b"open file fail\0",
        11 => b"tcp connect fail\0",
        12 => b"roce connect fail\0",
        13 => b"tcp transfer fail\0",
        14 => b"roce transfer fail\0",
        15 => b"call runtime api fail\0",
        16 => b"call driver api fail\0",
        17 => b"call profiling api fail\0",
        18 => b"call cce api fail\0",
        19 => b"call network api fail\0",
        20 => b"try again\0",
        21 => b"error cqe\0",
        22 => b"error communication suspending\0",
        _ => b"unknown error\0",
    };
    s.as_ptr().cast()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hccl_adapter::{HcclError, HcclResult};
    use std::ffi::CStr;

    #[test]
    fn strings_match_the_rust_error_codes() {
        for code in 1..=22u32 {
            // SAFETY: HcclGetErrorString returns a static NUL-terminated string.
            let s = unsafe { CStr::from_ptr(HcclGetErrorString(code)) }
                .to_str()
                .unwrap();
            let e = HcclError::from_code(code_of(code), "x");
            assert_eq!(e.code().code(), code);
            assert_eq!(s, e.code().as_str());
        }
        // SAFETY: as above.
        let s = unsafe { CStr::from_ptr(HcclGetErrorString(0)) };
        assert_eq!(s.to_str().unwrap(), "no error");
    }

    fn code_of(c: u32) -> HcclResult {
        use HcclResult::*;
        [
            Success,
            EPara,
            EPtr,
            EMemory,
            EInternal,
            ENotSupport,
            ENotFound,
            EUnavail,
            ESyscall,
            ETimeout,
            EOpenFileFailure,
            ETcpConnect,
            ERoceConnect,
            ETcpTransfer,
            ERoceTransfer,
            ERuntime,
            EDrv,
            EProfiling,
            ECce,
            ENetwork,
            EAgain,
            ERemote,
            ESuspending,
        ][c as usize]
    }
}
