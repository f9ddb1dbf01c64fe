/*
 * hccl-rs: HCCL-compatible types (hccl_types.h).
 *
 * Enum values, constants and struct layouts match Huawei HCCL's public
 * header so that programs written for HCCL compile unchanged. The ABI guard
 * test (ffi/tests/abi_guard.rs) checks this file against libhccl.
 */
#ifndef HCCL_TYPES_H_
#define HCCL_TYPES_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Result of every HCCL call. */
typedef enum {
    HCCL_SUCCESS = 0,              /**< success */
    HCCL_E_PARA = 1,               /**< parameter error */
    HCCL_E_PTR = 2,                /**< empty pointer */
    HCCL_E_MEMORY = 3,             /**< memory error */
    HCCL_E_INTERNAL = 4,           /**< internal error */
    HCCL_E_NOT_SUPPORT = 5,        /**< feature not supported */
    HCCL_E_NOT_FOUND = 6,          /**< resource not found */
    HCCL_E_UNAVAIL = 7,            /**< resource unavailable */
    HCCL_E_SYSCALL = 8,            /**< a system call failed */
    HCCL_E_TIMEOUT = 9,            /**< timeout */
    HCCL_E_OPEN_FILE_FAILURE = 10, /**< a file could not be opened */
    HCCL_E_TCP_CONNECT = 11,       /**< TCP connection failed */
    HCCL_E_ROCE_CONNECT = 12,      /**< RoCE connection failed */
    HCCL_E_TCP_TRANSFER = 13,      /**< TCP transfer failed */
    HCCL_E_ROCE_TRANSFER = 14,     /**< RoCE transfer failed */
    HCCL_E_RUNTIME = 15,           /**< a runtime call failed */
    HCCL_E_DRV = 16,               /**< a driver call failed */
    HCCL_E_PROFILING = 17,         /**< a profiling call failed */
    HCCL_E_CCE = 18,               /**< a CCE call failed */
    HCCL_E_NETWORK = 19,           /**< a network call failed */
    HCCL_E_AGAIN = 20,             /**< try again */
    HCCL_E_REMOTE = 21,            /**< error CQE */
    HCCL_E_SUSPENDING = 22,        /**< the communicator is suspending (aborted) */
    HCCL_E_OPRETRY_FAIL = 23,      /**< an op retry was not possible */
    HCCL_E_OOM = 24,               /**< out of memory */
    HCCL_E_IN_STATUS = 1041,       /**< the errors are in the request statuses */
    HCCL_E_RESERVED                /**< reserved (1042) */
} HcclResult;

/** Opaque communicator handle. */
typedef void *HcclComm;

/** Opaque symmetric window handle (HcclCommSymWinRegister). */
typedef void *HcclCommSymWindow;

/** Reduction operation. */
typedef enum {
    HCCL_REDUCE_SUM = 0,
    HCCL_REDUCE_PROD = 1,
    HCCL_REDUCE_MAX = 2,
    HCCL_REDUCE_MIN = 3,
    HCCL_REDUCE_RESERVED = 255
} HcclReduceOp;

/** Element type. */
typedef enum {
    HCCL_DATA_TYPE_INT8 = 0,
    HCCL_DATA_TYPE_INT16 = 1,
    HCCL_DATA_TYPE_INT32 = 2,
    HCCL_DATA_TYPE_FP16 = 3,
    HCCL_DATA_TYPE_FP32 = 4,
    HCCL_DATA_TYPE_INT64 = 5,
    HCCL_DATA_TYPE_UINT64 = 6,
    HCCL_DATA_TYPE_UINT8 = 7,
    HCCL_DATA_TYPE_UINT16 = 8,
    HCCL_DATA_TYPE_UINT32 = 9,
    HCCL_DATA_TYPE_FP64 = 10,
    HCCL_DATA_TYPE_BFP16 = 11,
    HCCL_DATA_TYPE_INT128 = 12,  /**< declared; refused by every op (as HCCL) */
    HCCL_DATA_TYPE_HIF8 = 14,    /**< HiFloat8: moved, never reduced */
    HCCL_DATA_TYPE_FP8E4M3 = 15, /**< FP8 E4M3: moved, never reduced */
    HCCL_DATA_TYPE_FP8E5M2 = 16, /**< FP8 E5M2: moved, never reduced */
    HCCL_DATA_TYPE_FP8E8M0 = 17, /**< FP8 E8M0: moved, never reduced */
    HCCL_DATA_TYPE_RESERVED = 255
} HcclDataType;

/** Process-wide options of HcclSetConfig / HcclGetConfig. */
typedef enum {
    HCCL_DETERMINISTIC = 0, /**< 0: non-deterministic, 1: deterministic, 2: strict (order-preserving) */
    HCCL_CONFIG_RESERVED
} HcclConfig;

/** Value of a process-wide option. */
typedef union HcclConfigValue {
    int32_t value;
} HcclConfigValue;

#define HCCL_ROOT_INFO_BYTES 4108 /* bytes in HcclRootInfo */
#define COMM_NAME_MAX_LENGTH 128  /* bytes in a communicator name, NUL included */
#define UDI_MAX_LENGTH 128        /* bytes in HcclCommConfig::hcclUdi */
#define BUFFER_NAME_MAX_LENGTH 128            /* bytes in HcclCommConfig::hcclBufferName */
#define HCCL_COMM_ALGO_MAX_LENGTH 1600        /* bytes in HcclCommConfig::hcclAlgo */
#define HCCL_COMM_RETRY_ENABLE_MAX_LENGTH 50  /* bytes in HcclCommConfig::hcclRetryEnable */
#define HCCL_COMM_RETRY_PARAMS_MAX_LENGTH 128 /* bytes in HcclCommConfig::hcclRetryParams */

/** What the root rank hands every rank to form a communicator. */
typedef struct HcclRootInfoDef {
    char internal[HCCL_ROOT_INFO_BYTES];
} HcclRootInfo;

#define HCCL_COMM_CONFIG_INFO_BYTES 24
#define HCCL_COMM_CONFIG_MAGIC_WORD 0xf0f0f0f0u
#define HCCL_COMM_CONFIG_VERSION 11
#define HCCL_COMM_DEFAULT_BUFFSIZE 200 /* MB */
#define HCCL_COMM_BUFFSIZE_CONFIG_NOT_SET 0xffffffffu
#define HCCL_COMM_DEFAULT_DETERMINISTIC 0
#define HCCL_COMM_DETERMINISTIC_CONFIG_NOT_SET 0xffffffffu
#define HCCL_COMM_DEFAULT_OP_EXPANSION_MODE 0
#define HCCL_COMM_TRAFFIC_CLASS_CONFIG_NOT_SET 0xffffffffu
#define HCCL_COMM_SERVICE_LEVEL_CONFIG_NOT_SET 0xffffffffu
#define HCCL_COMM_EXECTIMEOUT_CONFIG_NOT_SET (-1) /* int32_t 0xffffffff */
#define HCCL_COMM_QOS_CONFIG_NOT_SET 0xffffffffu
#define HCCL_COMM_SQ_DEPTH_CONFIG_NOT_SET 0xffffffffu
#define HCCL_DEFAULT_SYMMETRIC_MEMORY_STRIDE 16ULL /* GB */

/**
 * Per-communicator configuration (version 11, 2248 bytes). The first
 * HCCL_COMM_CONFIG_INFO_BYTES bytes are a versioned header (size_t size,
 * uint32_t magic, uint32_t version, uint64_t reserved) written by
 * HcclCommConfigInit; the library reads only the fields the header's size
 * covers (hcclQos from version 10, hcclChannelSqDepth from version 11), so
 * programs built with an older, shorter layout keep working.
 */
typedef struct HcclCommConfigDef {
    char reserved[HCCL_COMM_CONFIG_INFO_BYTES];
    uint32_t hcclBufferSize;    /**< CCL buffer size in MB (takes effect) */
    uint32_t hcclDeterministic; /**< 0, 1 or 2 (strict) */
    char hcclCommName[COMM_NAME_MAX_LENGTH];
    char hcclUdi[UDI_MAX_LENGTH];
    uint32_t hcclOpExpansionMode; /**< 0..6; recorded (ops expand on the host CPU here) */
    uint32_t hcclRdmaTrafficClass;
    uint32_t hcclRdmaServiceLevel;
    uint32_t hcclWorldRankID;        /**< recorded */
    uint64_t hcclJobID;              /**< recorded */
    uint8_t aclGraphZeroCopyEnable;  /**< 0 or 1; recorded */
    int32_t hcclExecTimeOut;         /**< s, like HCCL_EXEC_TIMEOUT (takes effect) */
    char hcclAlgo[HCCL_COMM_ALGO_MAX_LENGTH]; /**< HCCL_ALGO form (takes effect) */
    char hcclRetryEnable[HCCL_COMM_RETRY_ENABLE_MAX_LENGTH]; /**< op retry levels, "L0:0,L1:1" */
    char hcclRetryParams[HCCL_COMM_RETRY_PARAMS_MAX_LENGTH]; /**< "MaxCnt:3,HoldTime:5000,IntervalTime:1000" */
    char hcclBufferName[BUFFER_NAME_MAX_LENGTH];             /**< recorded */
    uint32_t hcclQos;                          /**< 0..7; recorded */
    uint64_t hcclSymWinMaxMemSizePerRank;      /**< GB; bounds HcclCommSymWinRegister */
    uint32_t hcclChannelSqDepth;               /**< recorded */
} HcclCommConfig;

/** Configuration fields; HcclGetCommConfigCapability returns the first unsupported one. */
typedef enum {
    HCCL_COMM_CONFIG_BUFFER_SIZE = 0,
    HCCL_COMM_CONFIG_DETERMINISTIC = 1,
    HCCL_COMM_CONFIG_COMM_NAME = 2,
    HCCL_COMM_CONFIG_OP_EXPANSION_MODE = 3,
    HCCL_COMM_CONFIG_SUPPORT_INIT_BY_ENV = 4,
    HCCL_COMM_CONFIG_WORLD_RANKID = 5,
    HCCL_COMM_CONFIG_JOBID = 6,
    HCCL_COMM_CONFIG_ACLGRAPH_ZEROCOPY_ENABLE = 7,
    HCCL_COMM_CONFIG_EXEC_TIMEOUT = 8,
    HCCL_COMM_CONFIG_ALGO = 9,
    HCCL_COMM_CONFIG_RETRY = 10,
    HCCL_COMM_CONFIG_BUFFER_NAME = 11,
    HCCL_COMM_CONFIG_RESERVED
} HcclCommConfigCapability;

/** Direction of one HcclBatchSendRecv item. */
typedef enum {
    HCCL_SEND = 0,
    HCCL_RECV = 1,
    HCCL_SEND_RECV_RESERVED
} HcclSendRecvType;

/** One point-to-point transfer of HcclBatchSendRecv. */
typedef struct HcclSendRecvItemDef {
    HcclSendRecvType sendRecvType;
    void *buf;
    uint64_t count;
    HcclDataType dataType;
    uint32_t remoteRank;
} HcclSendRecvItem;

/** A communicator's state (HcclCommGetStatus). */
typedef enum {
    HCCL_COMM_STATUS_READY = 0,      /**< ops are accepted */
    HCCL_COMM_STATUS_SUSPENDING = 1, /**< suspended (HcclCommSuspend): ops give HCCL_E_SUSPENDING */
    HCCL_COMM_STATUS_INVALID = 254,  /**< broken in the background (HcclGetCommAsyncError says why) */
    HCCL_COMM_STATUS_RESERVED = 255
} HcclCommStatus;

/** When a state callback (HcclCommRegCommStateCallback) is called. */
typedef enum {
    HCCL_COMM_STATE_PHASE_INVALID = -1,
    HCCL_COMM_STATE_PHASE_DESTROY_PRE = 0,  /**< before HcclCommDestroy */
    HCCL_COMM_STATE_PHASE_DESTROY_POST = 1, /**< after HcclCommDestroy */
    HCCL_COMM_STATE_PHASE_RESUME_PRE = 2,   /**< before HcclCommResume */
    HCCL_COMM_STATE_PHASE_RESUME_POST = 3   /**< after HcclCommResume */
} HcclCommStatePhase;

#ifdef __cplusplus
}
#endif
#endif /* HCCL_TYPES_H_ */
