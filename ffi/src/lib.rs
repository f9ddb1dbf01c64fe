//! hccl-ffi: the C ABI of hccl-rs.
//!
//! One library (`libhccl.so` / `libhccl.a`) exports two C surfaces:
//!
//! - **HCCL** (`include/hccl/hccl.h`): communicator setup, queries, every
//!   collective, batched send/receive and memory registration, with HCCL's
//!   names, signatures, enum values and struct layouts ([`hccl`]).
//! - **ACL runtime shim** (`include/acl/acl.h`): the devices, streams,
//!   memory and events HCCL programs use around the HCCL calls, on CPUs
//!   ([`acl`]), and ACL profiling (`include/acl/acl_prof.h`: `aclprof*`,
//!   writing the devices' timelines as Chrome trace JSON). An installed
//!   tree also names the library `libascendcl.so`, `libacl_rt.so` and
//!   `libmsprofiler.so` (symlinks), so such programs link unmodified.
//!
//! At the boundary: no panic crosses it (caught, logged, `HCCL_E_INTERNAL`
//! / `ACL_ERROR_INTERNAL_ERROR`); null pointers give `HCCL_E_PTR`;
//! out-of-range enums, counts and ranks give `HCCL_E_PARA`; handles are
//! looked up in registries, never dereferenced, so a destroyed or foreign
//! handle is an error, not a crash. Failures are logged through `tracing`
//! to stderr (filter with `HCCL_RS_LOG`, default `warn`).

// C names: parameters and fields keep the spelling of the HCCL/ACL headers.
#![allow(non_snake_case)]
// The exported functions are C entry points: their pointer arguments follow
// the headers' contract (valid or null), which C callers cannot express as
// `unsafe`. Rust programs should use hccl-adapter, not these functions.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

// The README's code is compiled and run as doc tests (`cargo test --doc`),
// so the page a registry shows cannot hold examples that no longer build.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

pub mod acl;
mod guard;
mod handles;
pub mod hccl;
mod mem;
pub mod types;

pub use guard::last_error_message;
