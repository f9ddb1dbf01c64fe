//! Helpers the C-API test programs share: result checks that print the
//! library's last error message, device memory to and from host slices,
//! and communicators with threads as ranks.

// each test program uses some of these
#![allow(dead_code)]

use hccl::acl::*;
use hccl::hccl::*;
use hccl::last_error_message;
use hccl::types::*;
use std::ffi::c_void;
use std::ptr::null_mut;

/// HCCL's `HCCL_SUCCESS`.
pub const SUCCESS: u32 = 0;

/// `code` is `HCCL_SUCCESS`; otherwise fails naming `what` and the message.
pub fn ok(code: u32, what: &str) {
    assert_eq!(code, SUCCESS, "{what}: {:?}", last_error_message());
}

/// `code` is `ACL_SUCCESS`; otherwise fails naming `what` and the message.
pub fn acl_ok(code: i32, what: &str) {
    assert_eq!(code, ACL_SUCCESS, "{what}: {:?}", last_error_message());
}

/// Device memory holding `data`.
pub fn dev_from<T: Copy>(data: &[T]) -> *mut c_void {
    let bytes = size_of_val(data).max(1);
    let mut p = null_mut();
    acl_ok(aclrtMalloc(&mut p, bytes, 0), "aclrtMalloc");
    acl_ok(
        aclrtMemcpy(p, bytes, data.as_ptr().cast(), size_of_val(data), 1),
        "aclrtMemcpy H2D",
    );
    p
}

/// `n` elements of device memory at `p`, copied to the host.
pub fn to_host<T: Copy + Default>(p: *const c_void, n: usize) -> Vec<T> {
    let mut v = vec![T::default(); n];
    let bytes = size_of_val(v.as_slice());
    acl_ok(
        aclrtMemcpy(v.as_mut_ptr().cast(), bytes, p, bytes, 2),
        "aclrtMemcpy D2H",
    );
    v
}

/// `p` communicators of this process (`HcclCommInitAll`, devices 0..p),
/// as addresses so they cross threads.
pub fn init_all(p: u32) -> Vec<usize> {
    let mut devices: Vec<i32> = (0..p as i32).collect();
    let mut comms = vec![null_mut(); p as usize];
    ok(
        HcclCommInitAll(p, devices.as_mut_ptr(), comms.as_mut_ptr()),
        "HcclCommInitAll",
    );
    comms.into_iter().map(|c| c as usize).collect()
}

/// Runs `f(rank, comm, stream)` on one thread per rank (device = rank),
/// each with a stream of its own synchronized at the end; destroys the
/// communicators after.
pub fn per_rank(p: u32, f: impl Fn(u32, HcclComm, aclrtStream) + Sync) {
    let comms = init_all(p);
    std::thread::scope(|s| {
        for (r, &c) in comms.iter().enumerate() {
            let f = &f;
            s.spawn(move || {
                acl_ok(aclrtSetDevice(r as i32), "aclrtSetDevice");
                let mut stream = null_mut();
                acl_ok(aclrtCreateStream(&mut stream), "aclrtCreateStream");
                f(r as u32, c as HcclComm, stream);
                acl_ok(aclrtSynchronizeStream(stream), "final sync");
                acl_ok(aclrtDestroyStream(stream), "aclrtDestroyStream");
            });
        }
    });
    for c in comms {
        ok(HcclCommDestroy(c as HcclComm), "HcclCommDestroy");
    }
}
