//! The C types and constants of `hccl_types.h` and of `acl_base.h`,
//! `acl_rt.h` and `acl_prof.h`, laid out and valued as the headers declare
//! them (the ABI guard test compares the two).
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
/// `aclrtEventStatus` (a C enum).
pub type aclrtEventStatus = u32;
/// `aclrtEventWaitStatus` (a C enum).
pub type aclrtEventWaitStatus = u32;
/// `aclrtStreamStatus` (a C enum).
pub type aclrtStreamStatus = u32;
/// `aclmdlRI`: an opaque model-run-instance handle (a captured graph).
pub type aclmdlRI = *mut c_void;
/// `aclmdlRICaptureMode` (a C enum).
pub type aclmdlRICaptureMode = u32;
/// `aclmdlRICaptureStatus` (a C enum).
pub type aclmdlRICaptureStatus = u32;
/// `aclprofAicoreMetrics` (a C enum).
pub type aclprofAicoreMetrics = u32;
/// `aclrtFloatOverflowMode` (a C enum).
pub type aclrtFloatOverflowMode = u32;
/// `aclrtMemAttr` (a C enum).
pub type aclrtMemAttr = u32;
/// `aclrtMemLocationType` (a C enum).
pub type aclrtMemLocationType = u32;
/// `aclrtMemAllocationType` (a C enum).
pub type aclrtMemAllocationType = u32;
/// `aclrtMemHandleType` (a C enum).
pub type aclrtMemHandleType = u32;
/// `aclrtMemGranularityOptions` (a C enum).
pub type aclrtMemGranularityOptions = u32;

/// `aclrtMemLocation`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct aclrtMemLocation {
    /// Device id (ignored for the host).
    pub id: u32,
    /// `ACL_MEM_LOCATION_TYPE_*`.
    pub type_: aclrtMemLocationType,
}

/// `aclrtPhysicalMemProp`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct aclrtPhysicalMemProp {
    /// `ACL_MEM_HANDLE_TYPE_NONE`.
    pub handleType: aclrtMemHandleType,
    /// `ACL_MEM_ALLOCATION_TYPE_PINNED`.
    pub allocationType: aclrtMemAllocationType,
    /// `aclrtMemAttr`.
    pub memAttr: aclrtMemAttr,
    /// Where the memory is.
    pub location: aclrtMemLocation,
    /// Reserved (0).
    pub reserve: u64,
}

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
/// `HCCL_COMM_CONFIG_RESERVED`: one past the last configuration field
/// (what `HcclGetCommConfigCapability` returns, as HCCL: 12).
pub const HCCL_COMM_CONFIG_RESERVED: u32 = 12;
/// `HCCL_COMM_CONFIG_VERSION`: the layout version `HcclCommConfigInit` writes.
pub const HCCL_COMM_CONFIG_VERSION: u32 = 11;
/// `BUFFER_NAME_MAX_LENGTH`: bytes of `hcclBufferName`.
pub const BUFFER_NAME_MAX_LENGTH: usize = 128;
/// `HCCL_COMM_ALGO_MAX_LENGTH`: bytes of `hcclAlgo`.
pub const HCCL_COMM_ALGO_MAX_LENGTH: usize = 1600;
/// `HCCL_COMM_RETRY_ENABLE_MAX_LENGTH`: bytes of `hcclRetryEnable`.
pub const HCCL_COMM_RETRY_ENABLE_MAX_LENGTH: usize = 50;
/// `HCCL_COMM_RETRY_PARAMS_MAX_LENGTH`: bytes of `hcclRetryParams`.
pub const HCCL_COMM_RETRY_PARAMS_MAX_LENGTH: usize = 128;
/// `HCCL_COMM_EXECTIMEOUT_CONFIG_NOT_SET`: `hcclExecTimeOut` not set (−1).
pub const HCCL_COMM_EXECTIMEOUT_CONFIG_NOT_SET: i32 = -1;
/// `HCCL_DEFAULT_SYMMETRIC_MEMORY_STRIDE`: default
/// `hcclSymWinMaxMemSizePerRank`, GB.
pub const HCCL_DEFAULT_SYMMETRIC_MEMORY_STRIDE: u64 = 16;

/// `HcclRootInfo`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct HcclRootInfo {
    /// Opaque bytes (root address, port, group id).
    pub internal: [c_char; HCCL_ROOT_INFO_BYTES],
}

/// `HcclCommConfig` (version 11 layout, 2,248 bytes; older versions are
/// shorter prefixes of it, told apart by the header's size and version).
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
    /// Global rank id of the process in the AI framework (NSLB-DP).
    pub hcclWorldRankID: u32,
    /// Job id (NSLB-DP).
    pub hcclJobID: u64,
    /// ACL graph zero copy (0/1).
    pub aclGraphZeroCopyEnable: u8,
    /// Execution timeout, s (`HCCL_COMM_EXECTIMEOUT_CONFIG_NOT_SET` = unset).
    pub hcclExecTimeOut: i32,
    /// Algorithms, `HCCL_ALGO` form.
    pub hcclAlgo: [c_char; HCCL_COMM_ALGO_MAX_LENGTH],
    /// Op retry switch (`"L1:1,L2:0"`).
    pub hcclRetryEnable: [c_char; HCCL_COMM_RETRY_ENABLE_MAX_LENGTH],
    /// Op retry parameters (`"MaxCnt:3,HoldTime:5000,IntervalTime:1000"`).
    pub hcclRetryParams: [c_char; HCCL_COMM_RETRY_PARAMS_MAX_LENGTH],
    /// CCL buffer name (communicators naming one buffer share it in HCCL).
    pub hcclBufferName: [c_char; BUFFER_NAME_MAX_LENGTH],
    /// Hyperplane QoS level, 0..=7 (`HCCL_COMM_QOS_CONFIG_NOT_SET` = unset).
    pub hcclQos: u32,
    /// Symmetric memory reserved per rank, GB.
    pub hcclSymWinMaxMemSizePerRank: u64,
    /// Send queue depth of channels (version 11).
    pub hcclChannelSqDepth: u32,
}

impl Default for HcclCommConfig {
    /// What the header's `static inline HcclCommConfigInit` writes: the
    /// version-11 header (size, magic word, version) and every field "not
    /// set" or at HCCL's default.
    fn default() -> Self {
        let mut reserved = [0 as c_char; HCCL_COMM_CONFIG_INFO_BYTES];
        let hdr = std::mem::size_of::<HcclCommConfig>()
            .to_ne_bytes()
            .into_iter()
            .chain(HCCL_COMM_CONFIG_MAGIC_WORD.to_ne_bytes())
            .chain(HCCL_COMM_CONFIG_VERSION.to_ne_bytes());
        for (d, s) in reserved.iter_mut().zip(hdr) {
            *d = s as c_char;
        }
        HcclCommConfig {
            reserved,
            hcclBufferSize: HCCL_CONFIG_NOT_SET,
            hcclDeterministic: HCCL_CONFIG_NOT_SET,
            hcclCommName: [0; COMM_NAME_MAX_LENGTH],
            hcclUdi: [0; UDI_MAX_LENGTH],
            hcclOpExpansionMode: 0,
            hcclRdmaTrafficClass: HCCL_CONFIG_NOT_SET,
            hcclRdmaServiceLevel: HCCL_CONFIG_NOT_SET,
            hcclWorldRankID: 0,
            hcclJobID: 0,
            aclGraphZeroCopyEnable: 0,
            hcclExecTimeOut: HCCL_COMM_EXECTIMEOUT_CONFIG_NOT_SET,
            hcclAlgo: [0; HCCL_COMM_ALGO_MAX_LENGTH],
            hcclRetryEnable: [0; HCCL_COMM_RETRY_ENABLE_MAX_LENGTH],
            hcclRetryParams: [0; HCCL_COMM_RETRY_PARAMS_MAX_LENGTH],
            hcclBufferName: [0; BUFFER_NAME_MAX_LENGTH],
            hcclQos: HCCL_CONFIG_NOT_SET,
            hcclSymWinMaxMemSizePerRank: HCCL_DEFAULT_SYMMETRIC_MEMORY_STRIDE,
            hcclChannelSqDepth: HCCL_CONFIG_NOT_SET,
        }
    }
}

/// `HcclCommStatus` (a C enum).
pub type HcclCommStatus = u32;
/// `HCCL_COMM_STATUS_READY`.
pub const HCCL_COMM_STATUS_READY: HcclCommStatus = 0;
/// `HCCL_COMM_STATUS_SUSPENDING`.
pub const HCCL_COMM_STATUS_SUSPENDING: HcclCommStatus = 1;
/// `HCCL_COMM_STATUS_INVALID`.
pub const HCCL_COMM_STATUS_INVALID: HcclCommStatus = 254;

/// `HcclCommStatePhase` (a C enum, signed).
pub type HcclCommStatePhase = i32;
/// `HCCL_COMM_STATE_PHASE_DESTROY_PRE`: before `HcclCommDestroy`.
pub const HCCL_COMM_STATE_PHASE_DESTROY_PRE: HcclCommStatePhase = 0;
/// `HCCL_COMM_STATE_PHASE_DESTROY_POST`: after `HcclCommDestroy`.
pub const HCCL_COMM_STATE_PHASE_DESTROY_POST: HcclCommStatePhase = 1;
/// `HCCL_COMM_STATE_PHASE_RESUME_PRE`: before `HcclCommResume`.
pub const HCCL_COMM_STATE_PHASE_RESUME_PRE: HcclCommStatePhase = 2;
/// `HCCL_COMM_STATE_PHASE_RESUME_POST`: after `HcclCommResume`.
pub const HCCL_COMM_STATE_PHASE_RESUME_POST: HcclCommStatePhase = 3;

/// `HcclCommStateCallback`.
pub type HcclCommStateCallback =
    Option<unsafe extern "C" fn(HcclComm, HcclCommStatePhase, *mut c_void) -> HcclResult>;

/// `HcclOpExpansionMode` (a C enum, signed).
pub type HcclOpExpansionMode = i32;
/// `HCCL_OP_EXPANSION_MODE_HOST`: expanded on the host CPU (what hccl-rs does).
pub const HCCL_OP_EXPANSION_MODE_HOST: HcclOpExpansionMode = 2;
/// `HcclConfigType` (a C enum, signed).
pub type HcclConfigType = i32;
/// `HCCL_CONFIG_TYPE_OP_EXPANSION_MODE`.
pub const HCCL_CONFIG_TYPE_OP_EXPANSION_MODE: HcclConfigType = 0;

/// `HcclOneSideOpDesc`: one transfer of `HcclBatchPut` / `HcclBatchGet`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct HcclOneSideOpDesc {
    /// This rank's buffer.
    pub localAddr: *mut c_void,
    /// The address in the remote rank's process (inside memory it
    /// registered and exchanged with this rank).
    pub remoteAddr: *mut c_void,
    /// Elements.
    pub count: u64,
    /// Element type.
    pub dataType: HcclDataType,
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

// The constants of `acl_base.h` and `acl_rt.h`: every one the headers
// define, with Ascend's names and values (github.com/hicann/runtime @
// 681ef761, include/external/acl/); the ABI guard checks that the headers
// define exactly these, with these values.

// General ACL error codes (acl_base.h).
pub const ACL_ERROR_NONE: aclError = 0;
pub const ACL_SUCCESS: aclError = 0;
pub const ACL_ERROR_INVALID_PARAM: aclError = 100_000;
pub const ACL_ERROR_UNINITIALIZE: aclError = 100_001;
pub const ACL_ERROR_REPEAT_INITIALIZE: aclError = 100_002;
pub const ACL_ERROR_INVALID_FILE: aclError = 100_003;
pub const ACL_ERROR_WRITE_FILE: aclError = 100_004;
pub const ACL_ERROR_INVALID_FILE_SIZE: aclError = 100_005;
pub const ACL_ERROR_PARSE_FILE: aclError = 100_006;
pub const ACL_ERROR_FILE_MISSING_ATTR: aclError = 100_007;
pub const ACL_ERROR_FILE_ATTR_INVALID: aclError = 100_008;
pub const ACL_ERROR_INVALID_DUMP_CONFIG: aclError = 100_009;
pub const ACL_ERROR_INVALID_PROFILING_CONFIG: aclError = 100_010;
pub const ACL_ERROR_INVALID_MODEL_ID: aclError = 100_011;
pub const ACL_ERROR_DESERIALIZE_MODEL: aclError = 100_012;
pub const ACL_ERROR_PARSE_MODEL: aclError = 100_013;
pub const ACL_ERROR_READ_MODEL_FAILURE: aclError = 100_014;
pub const ACL_ERROR_MODEL_SIZE_INVALID: aclError = 100_015;
pub const ACL_ERROR_MODEL_MISSING_ATTR: aclError = 100_016;
pub const ACL_ERROR_MODEL_INPUT_NOT_MATCH: aclError = 100_017;
pub const ACL_ERROR_MODEL_OUTPUT_NOT_MATCH: aclError = 100_018;
pub const ACL_ERROR_MODEL_NOT_DYNAMIC: aclError = 100_019;
pub const ACL_ERROR_OP_TYPE_NOT_MATCH: aclError = 100_020;
pub const ACL_ERROR_OP_INPUT_NOT_MATCH: aclError = 100_021;
pub const ACL_ERROR_OP_OUTPUT_NOT_MATCH: aclError = 100_022;
pub const ACL_ERROR_OP_ATTR_NOT_MATCH: aclError = 100_023;
pub const ACL_ERROR_OP_NOT_FOUND: aclError = 100_024;
pub const ACL_ERROR_OP_LOAD_FAILED: aclError = 100_025;
pub const ACL_ERROR_UNSUPPORTED_DATA_TYPE: aclError = 100_026;
pub const ACL_ERROR_FORMAT_NOT_MATCH: aclError = 100_027;
pub const ACL_ERROR_BIN_SELECTOR_NOT_REGISTERED: aclError = 100_028;
pub const ACL_ERROR_KERNEL_NOT_FOUND: aclError = 100_029;
pub const ACL_ERROR_BIN_SELECTOR_ALREADY_REGISTERED: aclError = 100_030;
pub const ACL_ERROR_KERNEL_ALREADY_REGISTERED: aclError = 100_031;
pub const ACL_ERROR_INVALID_QUEUE_ID: aclError = 100_032;
pub const ACL_ERROR_REPEAT_SUBSCRIBE: aclError = 100_033;
pub const ACL_ERROR_STREAM_NOT_SUBSCRIBE: aclError = 100_034;
pub const ACL_ERROR_THREAD_NOT_SUBSCRIBE: aclError = 100_035;
pub const ACL_ERROR_WAIT_CALLBACK_TIMEOUT: aclError = 100_036;
pub const ACL_ERROR_REPEAT_FINALIZE: aclError = 100_037;
pub const ACL_ERROR_NOT_STATIC_AIPP: aclError = 100_038;
pub const ACL_ERROR_COMPILING_STUB_MODE: aclError = 100_039;
pub const ACL_ERROR_GROUP_NOT_SET: aclError = 100_040;
pub const ACL_ERROR_GROUP_NOT_CREATE: aclError = 100_041;
/// `ACL_ERROR_PROF_ALREADY_RUN`: a device of the configuration is being
/// profiled already.
pub const ACL_ERROR_PROF_ALREADY_RUN: aclError = 100_042;
/// `ACL_ERROR_PROF_NOT_RUN`: profiling is not initialized (`aclprofInit`),
/// or a device is not being profiled.
pub const ACL_ERROR_PROF_NOT_RUN: aclError = 100_043;
pub const ACL_ERROR_DUMP_ALREADY_RUN: aclError = 100_044;
pub const ACL_ERROR_DUMP_NOT_RUN: aclError = 100_045;
pub const ACL_ERROR_PROF_REPEAT_SUBSCRIBE: aclError = 148_046;
pub const ACL_ERROR_PROF_API_CONFLICT: aclError = 148_047;
pub const ACL_ERROR_INVALID_MAX_OPQUEUE_NUM_CONFIG: aclError = 148_048;
pub const ACL_ERROR_INVALID_OPP_PATH: aclError = 148_049;
pub const ACL_ERROR_OP_UNSUPPORTED_DYNAMIC: aclError = 148_050;
pub const ACL_ERROR_RELATIVE_RESOURCE_NOT_CLEARED: aclError = 148_051;
pub const ACL_ERROR_UNSUPPORTED_JPEG: aclError = 148_052;
pub const ACL_ERROR_INVALID_BUNDLE_MODEL_ID: aclError = 148_053;
pub const ACL_ERROR_BAD_ALLOC: aclError = 200_000;
pub const ACL_ERROR_API_NOT_SUPPORT: aclError = 200_001;
pub const ACL_ERROR_INVALID_DEVICE: aclError = 200_002;
pub const ACL_ERROR_MEMORY_ADDRESS_UNALIGNED: aclError = 200_003;
pub const ACL_ERROR_RESOURCE_NOT_MATCH: aclError = 200_004;
pub const ACL_ERROR_INVALID_RESOURCE_HANDLE: aclError = 200_005;
pub const ACL_ERROR_FEATURE_UNSUPPORTED: aclError = 200_006;
pub const ACL_ERROR_PROF_MODULES_UNSUPPORTED: aclError = 200_007;
pub const ACL_ERROR_STORAGE_OVER_LIMIT: aclError = 300_000;
pub const ACL_ERROR_INTERNAL_ERROR: aclError = 500_000;
pub const ACL_ERROR_FAILURE: aclError = 500_001;
pub const ACL_ERROR_GE_FAILURE: aclError = 500_002;
pub const ACL_ERROR_RT_FAILURE: aclError = 500_003;
pub const ACL_ERROR_DRV_FAILURE: aclError = 500_004;
pub const ACL_ERROR_PROFILING_FAILURE: aclError = 500_005;

// Runtime error codes (rt_error_codes.h, included by acl_base.h).
pub const ACL_RT_SUCCESS: aclError = 0;
pub const ACL_ERROR_RT_PARAM_INVALID: aclError = 107_000;
pub const ACL_ERROR_RT_INVALID_DEVICEID: aclError = 107_001;
pub const ACL_ERROR_RT_CONTEXT_NULL: aclError = 107_002;
pub const ACL_ERROR_RT_STREAM_CONTEXT: aclError = 107_003;
pub const ACL_ERROR_RT_MODEL_CONTEXT: aclError = 107_004;
pub const ACL_ERROR_RT_STREAM_MODEL: aclError = 107_005;
pub const ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID: aclError = 107_006;
pub const ACL_ERROR_RT_EVENT_TIMESTAMP_REVERSAL: aclError = 107_007;
pub const ACL_ERROR_RT_ADDR_UNALIGNED: aclError = 107_008;
pub const ACL_ERROR_RT_FILE_OPEN: aclError = 107_009;
pub const ACL_ERROR_RT_FILE_WRITE: aclError = 107_010;
pub const ACL_ERROR_RT_STREAM_SUBSCRIBE: aclError = 107_011;
pub const ACL_ERROR_RT_THREAD_SUBSCRIBE: aclError = 107_012;
pub const ACL_ERROR_RT_GROUP_NOT_SET: aclError = 107_013;
pub const ACL_ERROR_RT_GROUP_NOT_CREATE: aclError = 107_014;
pub const ACL_ERROR_RT_STREAM_NO_CB_REG: aclError = 107_015;
pub const ACL_ERROR_RT_INVALID_MEMORY_TYPE: aclError = 107_016;
pub const ACL_ERROR_RT_INVALID_HANDLE: aclError = 107_017;
pub const ACL_ERROR_RT_INVALID_MALLOC_TYPE: aclError = 107_018;
pub const ACL_ERROR_RT_WAIT_TIMEOUT: aclError = 107_019;
pub const ACL_ERROR_RT_TASK_TIMEOUT: aclError = 107_020;
pub const ACL_ERROR_RT_SYSPARAMOPT_NOT_SET: aclError = 107_021;
pub const ACL_ERROR_RT_DEVICE_TASK_ABORT: aclError = 107_022;
pub const ACL_ERROR_RT_STREAM_ABORT: aclError = 107_023;
pub const ACL_ERROR_RT_CAPTURE_DEPENDENCY: aclError = 107_024;
pub const ACL_ERROR_RT_STREAM_UNJOINED: aclError = 107_025;
/// `ACL_ERROR_RT_MODEL_CAPTURED`: the model run instance is still being
/// captured.
pub const ACL_ERROR_RT_MODEL_CAPTURED: aclError = 107_026;
/// `ACL_ERROR_RT_STREAM_CAPTURED`: the stream is capturing.
pub const ACL_ERROR_RT_STREAM_CAPTURED: aclError = 107_027;
pub const ACL_ERROR_RT_EVENT_CAPTURED: aclError = 107_028;
/// `ACL_ERROR_RT_STREAM_NOT_CAPTURED`: the stream is not capturing.
pub const ACL_ERROR_RT_STREAM_NOT_CAPTURED: aclError = 107_029;
/// `ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT`: the capture's mode forbids
/// the call.
pub const ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT: aclError = 107_030;
pub const ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT: aclError = 107_031;
pub const ACL_ERROR_STREAM_CAPTURE_CONFLICT: aclError = 107_032;
pub const ACL_ERROR_STREAM_TASK_GROUP_STATUS: aclError = 107_033;
pub const ACL_ERROR_STREAM_TASK_GROUP_INTR: aclError = 107_034;
pub const ACL_ERROR_RT_TASK_ABORT_STOP: aclError = 107_035;
pub const ACL_ERROR_RT_STREAM_CAPTURE_UNMATCHED: aclError = 107_036;
pub const ACL_ERROR_RT_MODEL_RUNNING: aclError = 107_037;
pub const ACL_ERROR_RT_STREAM_CAPTURE_WRONG_THREAD: aclError = 107_038;
pub const ACL_ERROR_RT_INSUFFICIENT_INPUT_ARRAY: aclError = 107_039;
pub const ACL_ERROR_RT_MODEL_UPDATE_FAILED: aclError = 107_040;
pub const ACL_ERROR_RT_CAPTURE_MODE_BLOCK_ASYNC: aclError = 107_041;
pub const ACL_ERROR_RT_SYMBOL_NOT_FOUND: aclError = 107_042;
pub const ACL_ERROR_RT_INVALID_SYMBOL: aclError = 107_043;
pub const ACL_ERROR_RT_INVALID_DEVICE_FUNCTION: aclError = 107_044;
pub const ACL_ERROR_RT_SUB_ACLGRAPH_IS_CAPTURING: aclError = 107_045;
pub const ACL_ERROR_RT_FEATURE_NOT_SUPPORT: aclError = 207_000;
pub const ACL_ERROR_RT_MEMORY_ALLOCATION: aclError = 207_001;
pub const ACL_ERROR_RT_MEMORY_FREE: aclError = 207_002;
pub const ACL_ERROR_RT_AICORE_OVER_FLOW: aclError = 207_003;
pub const ACL_ERROR_RT_NO_DEVICE: aclError = 207_004;
pub const ACL_ERROR_RT_RESOURCE_ALLOC_FAIL: aclError = 207_005;
pub const ACL_ERROR_RT_NO_PERMISSION: aclError = 207_006;
pub const ACL_ERROR_RT_NO_EVENT_RESOURCE: aclError = 207_007;
pub const ACL_ERROR_RT_NO_STREAM_RESOURCE: aclError = 207_008;
pub const ACL_ERROR_RT_NO_NOTIFY_RESOURCE: aclError = 207_009;
pub const ACL_ERROR_RT_NO_MODEL_RESOURCE: aclError = 207_010;
pub const ACL_ERROR_RT_NO_CDQ_RESOURCE: aclError = 207_011;
pub const ACL_ERROR_RT_OVER_LIMIT: aclError = 207_012;
pub const ACL_ERROR_RT_QUEUE_EMPTY: aclError = 207_013;
pub const ACL_ERROR_RT_QUEUE_FULL: aclError = 207_014;
pub const ACL_ERROR_RT_REPEATED_INIT: aclError = 207_015;
pub const ACL_ERROR_RT_AIVEC_OVER_FLOW: aclError = 207_016;
pub const ACL_ERROR_RT_OVER_FLOW: aclError = 207_017;
pub const ACL_ERROR_RT_DEVICE_OOM: aclError = 207_018;
pub const ACL_ERROR_RT_FEATURE_NOT_SUPPORT_UPDATE_OP: aclError = 207_019;
pub const ACL_ERROR_RT_TIMEOUT: aclError = 207_020;
pub const ACL_ERROR_RT_LINK_TYPE_NOT_SUPPORTED: aclError = 207_021;
pub const ACL_ERROR_RT_INTERNAL_ERROR: aclError = 507_000;
pub const ACL_ERROR_RT_TS_ERROR: aclError = 507_001;
pub const ACL_ERROR_RT_STREAM_TASK_FULL: aclError = 507_002;
pub const ACL_ERROR_RT_STREAM_TASK_EMPTY: aclError = 507_003;
pub const ACL_ERROR_RT_STREAM_NOT_COMPLETE: aclError = 507_004;
pub const ACL_ERROR_RT_END_OF_SEQUENCE: aclError = 507_005;
pub const ACL_ERROR_RT_EVENT_NOT_COMPLETE: aclError = 507_006;
pub const ACL_ERROR_RT_CONTEXT_RELEASE_ERROR: aclError = 507_007;
pub const ACL_ERROR_RT_SOC_VERSION: aclError = 507_008;
pub const ACL_ERROR_RT_TASK_TYPE_NOT_SUPPORT: aclError = 507_009;
pub const ACL_ERROR_RT_LOST_HEARTBEAT: aclError = 507_010;
pub const ACL_ERROR_RT_MODEL_EXECUTE: aclError = 507_011;
pub const ACL_ERROR_RT_REPORT_TIMEOUT: aclError = 507_012;
pub const ACL_ERROR_RT_SYS_DMA: aclError = 507_013;
pub const ACL_ERROR_RT_AICORE_TIMEOUT: aclError = 507_014;
pub const ACL_ERROR_RT_AICORE_EXCEPTION: aclError = 507_015;
pub const ACL_ERROR_RT_AICORE_TRAP_EXCEPTION: aclError = 507_016;
pub const ACL_ERROR_RT_AICPU_TIMEOUT: aclError = 507_017;
pub const ACL_ERROR_RT_AICPU_EXCEPTION: aclError = 507_018;
pub const ACL_ERROR_RT_AICPU_DATADUMP_RSP_ERR: aclError = 507_019;
pub const ACL_ERROR_RT_AICPU_MODEL_RSP_ERR: aclError = 507_020;
pub const ACL_ERROR_RT_PROFILING_ERROR: aclError = 507_021;
pub const ACL_ERROR_RT_IPC_ERROR: aclError = 507_022;
pub const ACL_ERROR_RT_MODEL_ABORT_NORMAL: aclError = 507_023;
pub const ACL_ERROR_RT_KERNEL_UNREGISTERING: aclError = 507_024;
pub const ACL_ERROR_RT_RINGBUFFER_NOT_INIT: aclError = 507_025;
pub const ACL_ERROR_RT_RINGBUFFER_NO_DATA: aclError = 507_026;
pub const ACL_ERROR_RT_KERNEL_LOOKUP: aclError = 507_027;
pub const ACL_ERROR_RT_KERNEL_DUPLICATE: aclError = 507_028;
pub const ACL_ERROR_RT_DEBUG_REGISTER_FAIL: aclError = 507_029;
pub const ACL_ERROR_RT_DEBUG_UNREGISTER_FAIL: aclError = 507_030;
pub const ACL_ERROR_RT_LABEL_CONTEXT: aclError = 507_031;
pub const ACL_ERROR_RT_PROGRAM_USE_OUT: aclError = 507_032;
pub const ACL_ERROR_RT_DEV_SETUP_ERROR: aclError = 507_033;
pub const ACL_ERROR_RT_VECTOR_CORE_TIMEOUT: aclError = 507_034;
pub const ACL_ERROR_RT_VECTOR_CORE_EXCEPTION: aclError = 507_035;
pub const ACL_ERROR_RT_VECTOR_CORE_TRAP_EXCEPTION: aclError = 507_036;
pub const ACL_ERROR_RT_CDQ_BATCH_ABNORMAL: aclError = 507_037;
pub const ACL_ERROR_RT_DIE_MODE_CHANGE_ERROR: aclError = 507_038;
pub const ACL_ERROR_RT_DIE_SET_ERROR: aclError = 507_039;
pub const ACL_ERROR_RT_INVALID_DIEID: aclError = 507_040;
pub const ACL_ERROR_RT_DIE_MODE_NOT_SET: aclError = 507_041;
pub const ACL_ERROR_RT_AICORE_TRAP_READ_OVERFLOW: aclError = 507_042;
pub const ACL_ERROR_RT_AICORE_TRAP_WRITE_OVERFLOW: aclError = 507_043;
pub const ACL_ERROR_RT_VECTOR_CORE_TRAP_READ_OVERFLOW: aclError = 507_044;
pub const ACL_ERROR_RT_VECTOR_CORE_TRAP_WRITE_OVERFLOW: aclError = 507_045;
pub const ACL_ERROR_RT_STREAM_SYNC_TIMEOUT: aclError = 507_046;
pub const ACL_ERROR_RT_EVENT_SYNC_TIMEOUT: aclError = 507_047;
pub const ACL_ERROR_RT_FFTS_PLUS_TIMEOUT: aclError = 507_048;
pub const ACL_ERROR_RT_FFTS_PLUS_EXCEPTION: aclError = 507_049;
pub const ACL_ERROR_RT_FFTS_PLUS_TRAP_EXCEPTION: aclError = 507_050;
pub const ACL_ERROR_RT_SEND_MSG: aclError = 507_051;
pub const ACL_ERROR_RT_COPY_DATA: aclError = 507_052;
pub const ACL_ERROR_RT_DEVICE_MEM_ERROR: aclError = 507_053;
pub const ACL_ERROR_RT_HBM_MULTI_BIT_ECC_ERROR: aclError = 507_054;
pub const ACL_ERROR_RT_SUSPECT_DEVICE_MEM_ERROR: aclError = 507_055;
pub const ACL_ERROR_RT_LINK_ERROR: aclError = 507_056;
pub const ACL_ERROR_RT_SUSPECT_REMOTE_ERROR: aclError = 507_057;
pub const ACL_ERROR_RT_DRV_INTERNAL_ERROR: aclError = 507_899;
pub const ACL_ERROR_RT_AICPU_INTERNAL_ERROR: aclError = 507_900;
pub const ACL_ERROR_RT_SOCKET_CLOSE: aclError = 507_901;
pub const ACL_ERROR_RT_AICPU_INFO_LOAD_RSP_ERR: aclError = 507_902;
/// `ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED`: an error invalidated the
/// capture.
pub const ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED: aclError = 507_903;
pub const ACL_ERROR_RT_COMM_OP_RETRY_FAIL: aclError = 507_904;
pub const ACL_ERROR_SNAPSHOT_LOCK_TIMEOUT: aclError = 507_905;
pub const ACL_ERROR_SNAPSHOT_LOCK_FAILED: aclError = 507_906;
pub const ACL_ERROR_SNAPSHOT_UNLOCK_FAILED: aclError = 507_907;
pub const ACL_ERROR_SNAPSHOT_BACKUP_FAILED: aclError = 507_908;
pub const ACL_ERROR_SNAPSHOT_RESTORE_FAILED: aclError = 507_909;
pub const ACL_ERROR_HOST_MEMORY_ALREADY_REGISTERED: aclError = 507_910;
pub const ACL_ERROR_HOST_MEMORY_NOT_REGISTERED: aclError = 507_911;
pub const ACL_ERROR_SNAPSHOT_CALLBACK_FAILED: aclError = 507_912;
pub const ACL_ERROR_SNAPSHOT_REGISTER_CALLBACK_FAILED: aclError = 507_913;
pub const ACL_ERROR_RT_L3_PORT_ERROR: aclError = 507_914;
pub const ACL_ERROR_RT_CCU_TIMEOUT: aclError = 507_915;
pub const ACL_ERROR_RT_CCU_EXCEPTION: aclError = 507_916;

// `aclrtCreateEventWithFlag` flags.
pub const ACL_EVENT_SYNC: u32 = 0x01;
pub const ACL_EVENT_CAPTURE_STREAM_PROGRESS: u32 = 0x02;
pub const ACL_EVENT_TIME_LINE: u32 = 0x08;
pub const ACL_EVENT_DEVICE_USE_ONLY: u32 = 0x10;
pub const ACL_EVENT_EXTERNAL: u32 = 0x20;
pub const ACL_EVENT_IPC: u32 = 0x40;

// `aclrtCreateStreamWithConfig` flags (the function is not provided).
pub const ACL_STREAM_FAST_LAUNCH: u32 = 0x01;
pub const ACL_STREAM_FAST_SYNC: u32 = 0x02;
pub const ACL_STREAM_PERSISTENT: u32 = 0x04;
pub const ACL_STREAM_HUGE: u32 = 0x08;
pub const ACL_STREAM_CPU_SCHEDULE: u32 = 0x10;
pub const ACL_STREAM_DEVICE_USE_ONLY: u32 = 0x20;

// `aclrtSetStreamFailureMode` modes.
pub const ACL_CONTINUE_ON_FAILURE: u64 = 0;
pub const ACL_STOP_ON_FAILURE: u64 = 1;

// `aclrtRunMode`.
pub const ACL_DEVICE: aclrtRunMode = 0;
/// `ACL_HOST`: the run mode of a CPU "device".
pub const ACL_HOST: aclrtRunMode = 1;

// `aclrtEventRecordedStatus`.
pub const ACL_EVENT_RECORDED_STATUS_NOT_READY: aclrtEventRecordedStatus = 0;
pub const ACL_EVENT_RECORDED_STATUS_COMPLETE: aclrtEventRecordedStatus = 1;

// `aclrtEventStatus`.
pub const ACL_EVENT_STATUS_COMPLETE: aclrtEventStatus = 0;
pub const ACL_EVENT_STATUS_NOT_READY: aclrtEventStatus = 1;
pub const ACL_EVENT_STATUS_RESERVED: aclrtEventStatus = 2;

// `aclrtEventWaitStatus`.
pub const ACL_EVENT_WAIT_STATUS_COMPLETE: aclrtEventWaitStatus = 0;
pub const ACL_EVENT_WAIT_STATUS_NOT_READY: aclrtEventWaitStatus = 1;
pub const ACL_EVENT_WAIT_STATUS_RESERVED: aclrtEventWaitStatus = 0xffff;

// `aclrtStreamStatus`.
pub const ACL_STREAM_STATUS_COMPLETE: aclrtStreamStatus = 0;
pub const ACL_STREAM_STATUS_NOT_READY: aclrtStreamStatus = 1;
pub const ACL_STREAM_STATUS_RESERVED: aclrtStreamStatus = 0xffff;

// `aclrtMemcpyKind`.
pub const ACL_MEMCPY_HOST_TO_HOST: aclrtMemcpyKind = 0;
pub const ACL_MEMCPY_HOST_TO_DEVICE: aclrtMemcpyKind = 1;
pub const ACL_MEMCPY_DEVICE_TO_HOST: aclrtMemcpyKind = 2;
pub const ACL_MEMCPY_DEVICE_TO_DEVICE: aclrtMemcpyKind = 3;
pub const ACL_MEMCPY_DEFAULT: aclrtMemcpyKind = 4;
pub const ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE: aclrtMemcpyKind = 5;
pub const ACL_MEMCPY_INNER_DEVICE_TO_DEVICE: aclrtMemcpyKind = 6;
pub const ACL_MEMCPY_INTER_DEVICE_TO_DEVICE: aclrtMemcpyKind = 7;

// `aclrtMemMallocPolicy`.
pub const ACL_MEM_MALLOC_HUGE_FIRST: aclrtMemMallocPolicy = 0;
pub const ACL_MEM_MALLOC_HUGE_ONLY: aclrtMemMallocPolicy = 1;
pub const ACL_MEM_MALLOC_NORMAL_ONLY: aclrtMemMallocPolicy = 2;
pub const ACL_MEM_MALLOC_HUGE_FIRST_P2P: aclrtMemMallocPolicy = 3;
pub const ACL_MEM_MALLOC_HUGE_ONLY_P2P: aclrtMemMallocPolicy = 4;
pub const ACL_MEM_MALLOC_NORMAL_ONLY_P2P: aclrtMemMallocPolicy = 5;
pub const ACL_MEM_MALLOC_HUGE1G_ONLY: aclrtMemMallocPolicy = 6;
pub const ACL_MEM_MALLOC_HUGE1G_ONLY_P2P: aclrtMemMallocPolicy = 7;
pub const ACL_MEM_TYPE_LOW_BAND_WIDTH: aclrtMemMallocPolicy = 0x100;
pub const ACL_MEM_TYPE_HIGH_BAND_WIDTH: aclrtMemMallocPolicy = 0x1000;
pub const ACL_MEM_ACCESS_USER_SPACE_READONLY: aclrtMemMallocPolicy = 0x0010_0000;

// `aclrtFloatOverflowMode`.
pub const ACL_RT_OVERFLOW_MODE_SATURATION: aclrtFloatOverflowMode = 0;
pub const ACL_RT_OVERFLOW_MODE_INFNAN: aclrtFloatOverflowMode = 1;
pub const ACL_RT_OVERFLOW_MODE_UNDEF: aclrtFloatOverflowMode = 2;

// `aclrtMemAttr`.
pub const ACL_DDR_MEM: aclrtMemAttr = 0;
pub const ACL_HBM_MEM: aclrtMemAttr = 1;
pub const ACL_DDR_MEM_HUGE: aclrtMemAttr = 2;
pub const ACL_DDR_MEM_NORMAL: aclrtMemAttr = 3;
pub const ACL_HBM_MEM_HUGE: aclrtMemAttr = 4;
pub const ACL_HBM_MEM_NORMAL: aclrtMemAttr = 5;
pub const ACL_DDR_MEM_P2P_HUGE: aclrtMemAttr = 6;
pub const ACL_DDR_MEM_P2P_NORMAL: aclrtMemAttr = 7;
pub const ACL_HBM_MEM_P2P_HUGE: aclrtMemAttr = 8;
pub const ACL_HBM_MEM_P2P_NORMAL: aclrtMemAttr = 9;
pub const ACL_HBM_MEM_HUGE1G: aclrtMemAttr = 10;
pub const ACL_HBM_MEM_P2P_HUGE1G: aclrtMemAttr = 11;
pub const ACL_MEM_NORMAL: aclrtMemAttr = 12;
pub const ACL_MEM_HUGE: aclrtMemAttr = 13;
pub const ACL_MEM_HUGE1G: aclrtMemAttr = 14;
pub const ACL_MEM_P2P_NORMAL: aclrtMemAttr = 15;
pub const ACL_MEM_P2P_HUGE: aclrtMemAttr = 16;
pub const ACL_MEM_P2P_HUGE1G: aclrtMemAttr = 17;

// `aclrtMemLocationType`.
pub const ACL_MEM_LOCATION_TYPE_HOST: aclrtMemLocationType = 0;
pub const ACL_MEM_LOCATION_TYPE_DEVICE: aclrtMemLocationType = 1;
pub const ACL_MEM_LOCATION_TYPE_UNREGISTERED: aclrtMemLocationType = 2;
pub const ACL_MEM_LOCATION_TYPE_MANAGED: aclrtMemLocationType = 3;
pub const ACL_MEM_LOCATION_TYPE_HOST_NUMA: aclrtMemLocationType = 4;

// `aclrtMemAllocationType`.
pub const ACL_MEM_ALLOCATION_TYPE_PINNED: aclrtMemAllocationType = 0;

// `aclrtMemHandleType`.
pub const ACL_MEM_HANDLE_TYPE_NONE: aclrtMemHandleType = 0;
pub const ACL_MEM_HANDLE_TYPE_POSIX: aclrtMemHandleType = 2;

// `aclrtMemGranularityOptions`.
pub const ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM: aclrtMemGranularityOptions = 0;
pub const ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED: aclrtMemGranularityOptions = 1;
pub const ACL_RT_MEM_ALLOC_GRANULARITY_UNDEF: aclrtMemGranularityOptions = 0xffff;

// `aclmdlRICaptureMode`.
pub const ACL_MODEL_RI_CAPTURE_MODE_GLOBAL: aclmdlRICaptureMode = 0;
pub const ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL: aclmdlRICaptureMode = 1;
pub const ACL_MODEL_RI_CAPTURE_MODE_RELAXED: aclmdlRICaptureMode = 2;

// `aclmdlRICaptureStatus`.
pub const ACL_MODEL_RI_CAPTURE_STATUS_NONE: aclmdlRICaptureStatus = 0;
pub const ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE: aclmdlRICaptureStatus = 1;
pub const ACL_MODEL_RI_CAPTURE_STATUS_INVALIDATED: aclmdlRICaptureStatus = 2;

/// `HCCL_DETERMINISTIC`: the one `HcclConfig` option.
pub const HCCL_DETERMINISTIC: HcclConfig = 0;
/// `HCCL_SEND`.
pub const HCCL_SEND: HcclSendRecvType = 0;
/// `HCCL_RECV`.
pub const HCCL_RECV: HcclSendRecvType = 1;

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
