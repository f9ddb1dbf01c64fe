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
    HCCL_DETERMINISTIC = 0, /**< 0: non-deterministic, 1: deterministic */
    HCCL_CONFIG_RESERVED
} HcclConfig;

/** Value of a process-wide option. */
typedef union HcclConfigValue {
    int32_t value;
} HcclConfigValue;

#define HCCL_ROOT_INFO_BYTES 4108 /* bytes in HcclRootInfo */
#define COMM_NAME_MAX_LENGTH 128  /* bytes in a communicator name, NUL included */
#define UDI_MAX_LENGTH 128        /* bytes in HcclCommConfig::hcclUdi */

/** What the root rank hands every rank to form a communicator. */
typedef struct HcclRootInfoDef {
    char internal[HCCL_ROOT_INFO_BYTES];
} HcclRootInfo;

#define HCCL_COMM_CONFIG_INFO_BYTES 24
#define HCCL_COMM_CONFIG_MAGIC_WORD 0xf0f0f0f0u
#define HCCL_COMM_CONFIG_VERSION 5
#define HCCL_COMM_DEFAULT_BUFFSIZE 200 /* MB */
#define HCCL_COMM_BUFFSIZE_CONFIG_NOT_SET 0xffffffffu
#define HCCL_COMM_DEFAULT_DETERMINISTIC 0
#define HCCL_COMM_DETERMINISTIC_CONFIG_NOT_SET 0xffffffffu
#define HCCL_COMM_DEFAULT_OP_EXPANSION_MODE 0
#define HCCL_COMM_TRAFFIC_CLASS_CONFIG_NOT_SET 0xffffffffu
#define HCCL_COMM_SERVICE_LEVEL_CONFIG_NOT_SET 0xffffffffu

/**
 * Per-communicator configuration. The first HCCL_COMM_CONFIG_INFO_BYTES
 * bytes are a versioned header (size_t size, uint32_t magic, uint32_t
 * version, uint64_t reserved) written by HcclCommConfigInit; the library
 * reads only the fields the header's size covers.
 */
typedef struct HcclCommConfigDef {
    char reserved[HCCL_COMM_CONFIG_INFO_BYTES];
    uint32_t hcclBufferSize;    /**< CCL buffer size in MB */
    uint32_t hcclDeterministic; /**< 0 or 1 */
    char hcclCommName[COMM_NAME_MAX_LENGTH];
    char hcclUdi[UDI_MAX_LENGTH];
    uint32_t hcclOpExpansionMode; /**< 0 default, 1 host, 2 aicpu, 3 aiv */
    uint32_t hcclRdmaTrafficClass;
    uint32_t hcclRdmaServiceLevel;
} HcclCommConfig;

/** Configuration fields; HcclGetCommConfigCapability returns the first unsupported one. */
typedef enum {
    HCCL_COMM_CONFIG_BUFFER_SIZE = 0,
    HCCL_COMM_CONFIG_DETERMINISTIC = 1,
    HCCL_COMM_CONFIG_COMM_NAME = 2,
    HCCL_COMM_CONFIG_OP_EXPANSION_MODE = 3,
    HCCL_COMM_CONFIG_SUPPORT_INIT_BY_ENV = 4,
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

#ifdef __cplusplus
}
#endif
#endif /* HCCL_TYPES_H_ */
