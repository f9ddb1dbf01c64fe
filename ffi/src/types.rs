//! The C types of `hccl_types.h` and `acl_base.h`, laid out as the headers
//! declare them (the ABI guard test compares the two).
#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_void};

/// `HcclResult` (a C enum).
pub type HcclResult = u32;
/// `HcclComm`: an opaque handle.
pub type HcclComm = *mut c_void;
/// `HcclCommSymWindow`: a symmetric window handle.
pub type HcclCommSymWindow = *mut c_void;
/// `HcclDataType` (a C enum).
pub type HcclDataType = u32;
/// `HcclReduceOp` (a C enum).
pub type HcclReduceOp = u32;
/// `HcclConfig` (a C enum).
pub type HcclConfig = u32;
/// `HcclSendRecvType` (a C enum).
pub type HcclSendRecvType = u32;
/// `aclrtStream`: an opaque handle.
pub type aclrtStream = *mut c_void;
/// `aclrtEvent`: an opaque handle.
pub type aclrtEvent = *mut c_void;
/// `aclrtContext`: an opaque handle.
pub type aclrtContext = *mut c_void;
/// `aclrtDrvMemHandle`: an opaque physical-memory handle.
pub type aclrtDrvMemHandle = *mut c_void;
/// `aclError`.
pub type aclError = c_int;
/// `aclrtMemcpyKind` (a C enum).
pub type aclrtMemcpyKind = u32;
/// `aclrtMemMallocPolicy` (a C enum).
pub type aclrtMemMallocPolicy = u32;
/// `aclrtRunMode` (a C enum).
pub type aclrtRunMode = u32;
/// `aclrtEventRecordedStatus` (a C enum).
pub type aclrtEventRecordedStatus = u32;
/// `aclmdlRI`: an opaque model-run-instance handle (a captured graph).
pub type aclmdlRI = *mut c_void;
/// `aclmdlRICaptureMode` (a C enum).
pub type aclmdlRICaptureMode = u32;
/// `aclmdlRICaptureStatus` (a C enum).
pub type aclmdlRICaptureStatus = u32;
/// `aclprofAicoreMetrics` (a C enum).
pub type aclprofAicoreMetrics = u32;

/// `HCCL_ROOT_INFO_BYTES`.
pub const HCCL_ROOT_INFO_BYTES: usize = 4108;
/// `COMM_NAME_MAX_LENGTH`.
pub const COMM_NAME_MAX_LENGTH: usize = 128;
/// `UDI_MAX_LENGTH`.
pub const UDI_MAX_LENGTH: usize = 128;
/// `HCCL_COMM_CONFIG_INFO_BYTES`: the versioned header of [`HcclCommConfig`].
pub const HCCL_COMM_CONFIG_INFO_BYTES: usize = 24;
/// `HCCL_COMM_CONFIG_MAGIC_WORD`.
pub const HCCL_COMM_CONFIG_MAGIC_WORD: u32 = 0xf0f0_f0f0;
/// `HCCL_COMM_BUFFSIZE_CONFIG_NOT_SET` (and the other "not set" values).
pub const HCCL_CONFIG_NOT_SET: u32 = 0xffff_ffff;
/// `HCCL_COMM_CONFIG_RESERVED`: one past the last configuration field.
pub const HCCL_COMM_CONFIG_RESERVED: u32 = 5;

/// `HcclRootInfo`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct HcclRootInfo {
    /// Opaque bytes (root address, port, group id).
    pub internal: [c_char; HCCL_ROOT_INFO_BYTES],
}

/// `HcclCommConfig` (version 5 layout).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct HcclCommConfig {
    /// Versioned header: size (size_t), magic (u32), version (u32), reserved (u64).
    pub reserved: [c_char; HCCL_COMM_CONFIG_INFO_BYTES],
    /// CCL buffer size, MB.
    pub hcclBufferSize: u32,
    /// Deterministic reduction (0/1).
    pub hcclDeterministic: u32,
    /// Communicator name, NUL-terminated.
    pub hcclCommName: [c_char; COMM_NAME_MAX_LENGTH],
    /// User-defined identifier.
    pub hcclUdi: [c_char; UDI_MAX_LENGTH],
    /// Op expansion mode (0 default, 1 host, 2 aicpu, 3 aiv).
    pub hcclOpExpansionMode: u32,
    /// RDMA traffic class.
    pub hcclRdmaTrafficClass: u32,
    /// RDMA service level.
    pub hcclRdmaServiceLevel: u32,
}

/// `HcclSendRecvItem`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct HcclSendRecvItem {
    /// `HCCL_SEND` (0) or `HCCL_RECV` (1).
    pub sendRecvType: HcclSendRecvType,
    /// Data buffer.
    pub buf: *mut c_void,
    /// Elements.
    pub count: u64,
    /// Element type.
    pub dataType: HcclDataType,
    /// The other rank.
    pub remoteRank: u32,
}

/// `HcclConfigValue`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union HcclConfigValue {
    /// The option's value.
    pub value: i32,
}

/// `ACL_SUCCESS`.
pub const ACL_SUCCESS: aclError = 0;
/// `ACL_ERROR_INVALID_PARAM`.
pub const ACL_ERROR_INVALID_PARAM: aclError = 100_000;
/// `ACL_ERROR_UNINITIALIZE`.
pub const ACL_ERROR_UNINITIALIZE: aclError = 100_001;
/// `ACL_ERROR_REPEAT_INITIALIZE`.
pub const ACL_ERROR_REPEAT_INITIALIZE: aclError = 100_002;
/// `ACL_ERROR_WRITE_FILE`.
pub const ACL_ERROR_WRITE_FILE: aclError = 100_004;
/// `ACL_ERROR_REPEAT_FINALIZE`.
pub const ACL_ERROR_REPEAT_FINALIZE: aclError = 100_037;
/// `ACL_ERROR_PROF_ALREADY_RUN`: a device of the configuration is being
/// profiled already.
pub const ACL_ERROR_PROF_ALREADY_RUN: aclError = 100_042;
/// `ACL_ERROR_PROF_NOT_RUN`: profiling is not initialized (`aclprofInit`),
/// or a device is not being profiled.
pub const ACL_ERROR_PROF_NOT_RUN: aclError = 100_043;
/// `ACL_ERROR_BAD_ALLOC`.
pub const ACL_ERROR_BAD_ALLOC: aclError = 200_000;
/// `ACL_ERROR_INVALID_DEVICE`.
pub const ACL_ERROR_INVALID_DEVICE: aclError = 200_002;
/// `ACL_ERROR_INVALID_RESOURCE_HANDLE`.
pub const ACL_ERROR_INVALID_RESOURCE_HANDLE: aclError = 200_005;
/// `ACL_ERROR_INTERNAL_ERROR`.
pub const ACL_ERROR_INTERNAL_ERROR: aclError = 500_000;
/// `ACL_ERROR_RT_FAILURE`.
pub const ACL_ERROR_RT_FAILURE: aclError = 500_003;

/// `ACL_ERROR_RT_MODEL_CAPTURED`: the model run instance is still being
/// captured.
pub const ACL_ERROR_RT_MODEL_CAPTURED: aclError = 107_026;
/// `ACL_ERROR_RT_STREAM_CAPTURED`: the stream is capturing.
pub const ACL_ERROR_RT_STREAM_CAPTURED: aclError = 107_027;
/// `ACL_ERROR_RT_STREAM_NOT_CAPTURED`: the stream is not capturing.
pub const ACL_ERROR_RT_STREAM_NOT_CAPTURED: aclError = 107_029;
/// `ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT`: the capture's mode forbids
/// the call.
pub const ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT: aclError = 107_030;
/// `ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED`: an error invalidated the
/// capture.
pub const ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED: aclError = 507_903;

/// `ACL_MODEL_RI_CAPTURE_MODE_GLOBAL`.
pub const ACL_MODEL_RI_CAPTURE_MODE_GLOBAL: aclmdlRICaptureMode = 0;
/// `ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL`.
pub const ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL: aclmdlRICaptureMode = 1;
/// `ACL_MODEL_RI_CAPTURE_MODE_RELAXED`.
pub const ACL_MODEL_RI_CAPTURE_MODE_RELAXED: aclmdlRICaptureMode = 2;
/// `ACL_MODEL_RI_CAPTURE_STATUS_NONE`.
pub const ACL_MODEL_RI_CAPTURE_STATUS_NONE: aclmdlRICaptureStatus = 0;
/// `ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE`.
pub const ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE: aclmdlRICaptureStatus = 1;
/// `ACL_MODEL_RI_CAPTURE_STATUS_INVALIDATED`.
pub const ACL_MODEL_RI_CAPTURE_STATUS_INVALIDATED: aclmdlRICaptureStatus = 2;

/// `HCCL_DETERMINISTIC`: the one `HcclConfig` option.
pub const HCCL_DETERMINISTIC: HcclConfig = 0;
/// `HCCL_SEND`.
pub const HCCL_SEND: HcclSendRecvType = 0;
/// `HCCL_RECV`.
pub const HCCL_RECV: HcclSendRecvType = 1;
/// `ACL_MEMCPY_DEFAULT`: the largest `aclrtMemcpyKind`.
pub const ACL_MEMCPY_DEFAULT: aclrtMemcpyKind = 4;
/// `ACL_MEM_MALLOC_NORMAL_ONLY_P2P`: the largest `aclrtMemMallocPolicy`.
pub const ACL_MEM_MALLOC_NORMAL_ONLY_P2P: aclrtMemMallocPolicy = 5;
/// `ACL_HOST`: the run mode of a CPU "device".
pub const ACL_HOST: aclrtRunMode = 1;
/// `ACL_EVENT_RECORDED_STATUS_COMPLETE`.
pub const ACL_EVENT_RECORDED_STATUS_COMPLETE: aclrtEventRecordedStatus = 1;

/// `aclprofConfig`: opaque (an incomplete C type; pointers to it are
/// registry handles, never dereferenced).
#[repr(C)]
pub struct aclprofConfig {
    _unused: [u8; 0],
}

/// `aclprofAicoreEvents`: opaque (an incomplete C type; only NULL is
/// accepted).
#[repr(C)]
pub struct aclprofAicoreEvents {
    _unused: [u8; 0],
}

/// `ACL_PROF_ACL_API`.
pub const ACL_PROF_ACL_API: u64 = 0x0001;
/// `ACL_PROF_TASK_TIME`.
pub const ACL_PROF_TASK_TIME: u64 = 0x0002;
/// `ACL_PROF_AICORE_METRICS`.
pub const ACL_PROF_AICORE_METRICS: u64 = 0x0004;
/// `ACL_PROF_AICPU`.
pub const ACL_PROF_AICPU: u64 = 0x0008;
/// `ACL_PROF_L2CACHE`.
pub const ACL_PROF_L2CACHE: u64 = 0x0010;
/// `ACL_PROF_HCCL_TRACE`.
pub const ACL_PROF_HCCL_TRACE: u64 = 0x0020;
/// `ACL_PROF_TRAINING_TRACE`.
pub const ACL_PROF_TRAINING_TRACE: u64 = 0x0040;
/// `ACL_PROF_MSPROFTX`.
pub const ACL_PROF_MSPROFTX: u64 = 0x0080;
/// `ACL_PROF_RUNTIME_API`.
pub const ACL_PROF_RUNTIME_API: u64 = 0x0100;
/// `ACL_PROF_GE_API_L0`.
pub const ACL_PROF_GE_API_L0: u64 = 0x0200;
/// `ACL_PROF_TASK_TIME_L0`.
pub const ACL_PROF_TASK_TIME_L0: u64 = 0x0800;
/// `ACL_PROF_TASK_MEMORY`.
pub const ACL_PROF_TASK_MEMORY: u64 = 0x1000;
/// `ACL_PROF_GE_API_L1`.
pub const ACL_PROF_GE_API_L1: u64 = 0x0100_0000;
/// `ACL_PROF_TASK_TIME_L2`.
pub const ACL_PROF_TASK_TIME_L2: u64 = 0x2000;
/// `ACL_PROF_OP_ATTR`.
pub const ACL_PROF_OP_ATTR: u64 = 0x4000;
/// `ACL_PROF_TASK_TIME_L3`.
pub const ACL_PROF_TASK_TIME_L3: u64 = 0x8000;

/// `ACL_AICORE_ARITHMETIC_UTILIZATION`.
pub const ACL_AICORE_ARITHMETIC_UTILIZATION: aclprofAicoreMetrics = 0;
/// `ACL_AICORE_PIPE_UTILIZATION`.
pub const ACL_AICORE_PIPE_UTILIZATION: aclprofAicoreMetrics = 1;
/// `ACL_AICORE_MEMORY_BANDWIDTH`.
pub const ACL_AICORE_MEMORY_BANDWIDTH: aclprofAicoreMetrics = 2;
/// `ACL_AICORE_L0B_AND_WIDTH`.
pub const ACL_AICORE_L0B_AND_WIDTH: aclprofAicoreMetrics = 3;
/// `ACL_AICORE_RESOURCE_CONFLICT_RATIO`.
pub const ACL_AICORE_RESOURCE_CONFLICT_RATIO: aclprofAicoreMetrics = 4;
/// `ACL_AICORE_MEMORY_UB`.
pub const ACL_AICORE_MEMORY_UB: aclprofAicoreMetrics = 5;
/// `ACL_AICORE_L2_CACHE`.
pub const ACL_AICORE_L2_CACHE: aclprofAicoreMetrics = 6;
/// `ACL_AICORE_PIPE_EXECUTE_UTILIZATION`.
pub const ACL_AICORE_PIPE_EXECUTE_UTILIZATION: aclprofAicoreMetrics = 7;
/// `ACL_AICORE_MEMORY_ACCESS`.
pub const ACL_AICORE_MEMORY_ACCESS: aclprofAicoreMetrics = 8;
/// `ACL_AICORE_NONE`.
pub const ACL_AICORE_NONE: aclprofAicoreMetrics = 0xFF;

/// Opaque `void` for pointer arguments.
pub type Void = c_void;
