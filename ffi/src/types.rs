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

/// `ACL_RT_OVERFLOW_MODE_SATURATION`.
pub const ACL_RT_OVERFLOW_MODE_SATURATION: aclrtFloatOverflowMode = 0;
/// `ACL_RT_OVERFLOW_MODE_INFNAN`.
pub const ACL_RT_OVERFLOW_MODE_INFNAN: aclrtFloatOverflowMode = 1;
/// `ACL_RT_OVERFLOW_MODE_UNDEF`.
pub const ACL_RT_OVERFLOW_MODE_UNDEF: aclrtFloatOverflowMode = 2;
/// `ACL_CONTINUE_ON_FAILURE`.
pub const ACL_CONTINUE_ON_FAILURE: u64 = 0;
/// `ACL_STOP_ON_FAILURE`.
pub const ACL_STOP_ON_FAILURE: u64 = 1;
/// `ACL_DDR_MEM`: the first `aclrtMemAttr`.
pub const ACL_DDR_MEM: aclrtMemAttr = 0;
/// `ACL_HBM_MEM_P2P_HUGE1G`: the last `aclrtMemAttr`.
pub const ACL_HBM_MEM_P2P_HUGE1G: aclrtMemAttr = 11;
/// `ACL_MEM_LOCATION_TYPE_HOST`.
pub const ACL_MEM_LOCATION_TYPE_HOST: aclrtMemLocationType = 0;
/// `ACL_MEM_LOCATION_TYPE_DEVICE`.
pub const ACL_MEM_LOCATION_TYPE_DEVICE: aclrtMemLocationType = 1;
/// `ACL_MEM_ALLOCATION_TYPE_PINNED`.
pub const ACL_MEM_ALLOCATION_TYPE_PINNED: aclrtMemAllocationType = 0;
/// `ACL_MEM_HANDLE_TYPE_NONE`.
pub const ACL_MEM_HANDLE_TYPE_NONE: aclrtMemHandleType = 0;
/// `ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM`.
pub const ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM: aclrtMemGranularityOptions = 0;
/// `ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED`.
pub const ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED: aclrtMemGranularityOptions = 1;
/// `ACL_ERROR_API_NOT_SUPPORT`.
pub const ACL_ERROR_API_NOT_SUPPORT: aclError = 200_001;
/// `ACL_ERROR_MEMORY_ADDRESS_UNALIGNED`.
pub const ACL_ERROR_MEMORY_ADDRESS_UNALIGNED: aclError = 200_003;
/// `ACL_ERROR_FEATURE_UNSUPPORTED`.
pub const ACL_ERROR_FEATURE_UNSUPPORTED: aclError = 200_006;

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
