/*
 * hccl-rs: HCCL-compatible C API (hccl.h), implemented by libhccl.
 *
 * Names, signatures and semantics follow Huawei HCCL. Streams are the
 * aclrtStream handles of the CPU runtime shim (<acl/acl.h>): an op call
 * validates its arguments, enqueues the op on the stream and returns;
 * aclrtSynchronizeStream waits for it. "Device" memory is host memory.
 *
 * Every call returns HCCL_SUCCESS or an error code; no call aborts the
 * process. Null pointers give HCCL_E_PTR; out-of-range enums, counts and
 * ranks give HCCL_E_PARA; a destroyed or unknown communicator handle gives
 * HCCL_E_PARA. HcclGetErrorString describes a code; the library logs the
 * details (set RUST_LOG=hccl=debug to see them).
 */
#ifndef HCCL_H_
#define HCCL_H_

#include <string.h>

#include <hccl/hccl_types.h>
#include <hccl/hccl_comm.h>
#include <acl/acl.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- communicator setup ------------------------------------------------ */

/** Rank `rank` joins the communicator described by the rank table JSON at `clusterInfo`. */
extern HcclResult HcclCommInitClusterInfo(const char *clusterInfo, uint32_t rank, HcclComm *comm);

/** HcclCommInitClusterInfo with a configuration (NULL = defaults). */
extern HcclResult HcclCommInitClusterInfoConfig(const char *clusterInfo, uint32_t rank,
    HcclCommConfig *config, HcclComm *comm);

/**
 * The ranks `rankIds[0..rankNum)` of `*comm` form a new communicator in which
 * this rank is `subCommRankId`; every listed rank calls it with the same
 * `subCommId`.
 */
extern HcclResult HcclCreateSubCommConfig(HcclComm *comm, uint32_t rankNum, uint32_t *rankIds,
    uint64_t subCommId, uint32_t subCommRankId, HcclCommConfig *config, HcclComm *subComm);

/** Called once on the root rank; the result is handed to every rank. */
extern HcclResult HcclGetRootInfo(HcclRootInfo *rootInfo);

/** This process (or thread) becomes rank `rank` of `nRanks`. */
extern HcclResult HcclCommInitRootInfo(uint32_t nRanks, const HcclRootInfo *rootInfo, uint32_t rank,
    HcclComm *comm);

/** HcclCommInitRootInfo with a configuration (NULL = defaults). */
extern HcclResult HcclCommInitRootInfoConfig(uint32_t nRanks, const HcclRootInfo *rootInfo,
    uint32_t rank, const HcclCommConfig *config, HcclComm *comm);

/** `ndev` ranks in this process, rank i on device `devices[i]`; fills `comms[0..ndev)`. */
extern HcclResult HcclCommInitAll(uint32_t ndev, int32_t *devices, HcclComm *comms);

/** Releases a communicator; the handle is invalid afterwards. */
extern HcclResult HcclCommDestroy(HcclComm comm);

/** Sets a process-wide option. */
extern HcclResult HcclSetConfig(HcclConfig config, HcclConfigValue configValue);

/** Reads a process-wide option. */
extern HcclResult HcclGetConfig(HcclConfig config, HcclConfigValue *configValue);

/* ---- queries ------------------------------------------------------------ */

/** Copies the communicator's name (at most COMM_NAME_MAX_LENGTH bytes, NUL included). */
extern HcclResult HcclGetCommName(HcclComm comm, char *commName);

/** Number of ranks. */
extern HcclResult HcclGetRankSize(HcclComm comm, uint32_t *rankSize);

/** This rank's id. */
extern HcclResult HcclGetRankId(HcclComm comm, uint32_t *rank);

/** What broke the communicator in the background (HCCL_SUCCESS if nothing). */
extern HcclResult HcclGetCommAsyncError(HcclComm comm, HcclResult *asyncError);

/** A static description of a result code. */
extern const char *HcclGetErrorString(HcclResult code);

/** The first HcclCommConfigCapability this library does not support (12: all, as HCCL). */
extern uint32_t HcclGetCommConfigCapability(void);

/* ---- collectives -------------------------------------------------------- */

extern HcclResult HcclAllReduce(void *sendBuf, void *recvBuf, uint64_t count, HcclDataType dataType,
    HcclReduceOp op, HcclComm comm, aclrtStream stream);

extern HcclResult HcclBroadcast(void *buf, uint64_t count, HcclDataType dataType, uint32_t root,
    HcclComm comm, aclrtStream stream);

extern HcclResult HcclReduceScatter(void *sendBuf, void *recvBuf, uint64_t recvCount,
    HcclDataType dataType, HcclReduceOp op, HcclComm comm, aclrtStream stream);

/** `sendCounts` and `sendDispls` are arrays of rankSize uint64_t. */
extern HcclResult HcclReduceScatterV(void *sendBuf, const void *sendCounts, const void *sendDispls,
    void *recvBuf, uint64_t recvCount, HcclDataType dataType, HcclReduceOp op, HcclComm comm,
    aclrtStream stream);

extern HcclResult HcclScatter(void *sendBuf, void *recvBuf, uint64_t recvCount, HcclDataType dataType,
    uint32_t root, HcclComm comm, aclrtStream stream);

extern HcclResult HcclAllGather(void *sendBuf, void *recvBuf, uint64_t sendCount, HcclDataType dataType,
    HcclComm comm, aclrtStream stream);

/** `recvCounts` and `recvDispls` are arrays of rankSize uint64_t. */
extern HcclResult HcclAllGatherV(void *sendBuf, uint64_t sendCount, void *recvBuf,
    const void *recvCounts, const void *recvDispls, HcclDataType dataType, HcclComm comm,
    aclrtStream stream);

extern HcclResult HcclReduce(void *sendBuf, void *recvBuf, uint64_t count, HcclDataType dataType,
    HcclReduceOp op, uint32_t root, HcclComm comm, aclrtStream stream);

extern HcclResult HcclAlltoAll(const void *sendBuf, uint64_t sendCount, HcclDataType sendType,
    const void *recvBuf, uint64_t recvCount, HcclDataType recvType, HcclComm comm, aclrtStream stream);

/** Counts and displacements are arrays of rankSize uint64_t. */
extern HcclResult HcclAlltoAllV(const void *sendBuf, const void *sendCounts, const void *sdispls,
    HcclDataType sendType, const void *recvBuf, const void *recvCounts, const void *rdispls,
    HcclDataType recvType, HcclComm comm, aclrtStream stream);

/**
 * `sendCountMatrix` is rankSize x rankSize uint64_t, the same on every rank:
 * entry [i * rankSize + j] is the number of elements rank i sends to rank j.
 * Blocks are packed in rank order: this rank's block for rank j starts at the
 * sum of its counts to ranks below j; rank i's block lands at the sum of the
 * counts ranks below i send to this rank. sendType must equal recvType.
 */
extern HcclResult HcclAlltoAllVC(const void *sendBuf, const void *sendCountMatrix, HcclDataType sendType,
    const void *recvBuf, HcclDataType recvType, HcclComm comm, aclrtStream stream);

extern HcclResult HcclSend(void *sendBuf, uint64_t count, HcclDataType dataType, uint32_t destRank,
    HcclComm comm, aclrtStream stream);

extern HcclResult HcclRecv(void *recvBuf, uint64_t count, HcclDataType dataType, uint32_t srcRank,
    HcclComm comm, aclrtStream stream);

/** The items run as one group: no item waits for a later item of the same call. */
extern HcclResult HcclBatchSendRecv(HcclSendRecvItem *sendRecvInfo, uint32_t itemNum, HcclComm comm,
    aclrtStream stream);

extern HcclResult HcclBarrier(HcclComm comm, aclrtStream stream);

/* ---- memory registration ------------------------------------------------ */

/** Registers the address range [baseVirPtr, baseVirPtr+size) with the communicator. */
extern HcclResult HcclCommSetMemoryRange(HcclComm comm, void *baseVirPtr, size_t size, size_t alignment,
    uint64_t flags);

/** Removes a range set by HcclCommSetMemoryRange (no active memory may remain in it). */
extern HcclResult HcclCommUnsetMemoryRange(HcclComm comm, void *baseVirPtr);

/** Marks [virPtr, virPtr+size) inside a set range as active communication memory. */
extern HcclResult HcclCommActivateCommMemory(HcclComm comm, void *virPtr, size_t size, size_t offset,
    aclrtDrvMemHandle handle, uint64_t flags);

/** Undoes HcclCommActivateCommMemory. */
extern HcclResult HcclCommDeactivateCommMemory(HcclComm comm, void *virPtr);

/* ---- configuration ------------------------------------------------------ */

/** Fills `config` with its versioned header and "not set" values. */
static inline void HcclCommConfigInit(HcclCommConfig *config)
{
    size_t size = sizeof(HcclCommConfig);
    uint32_t magic = HCCL_COMM_CONFIG_MAGIC_WORD;
    uint32_t version = HCCL_COMM_CONFIG_VERSION;
    uint64_t reserved = 0;
    if (config == NULL) {
        return;
    }
    /* memcpy: the header is a char array, so it may not be aligned for size_t. */
    memcpy(config->reserved, &size, sizeof(size));
    memcpy(config->reserved + 8, &magic, sizeof(magic));
    memcpy(config->reserved + 12, &version, sizeof(version));
    memcpy(config->reserved + 16, &reserved, sizeof(reserved));
    config->hcclBufferSize = HCCL_COMM_BUFFSIZE_CONFIG_NOT_SET;
    config->hcclDeterministic = HCCL_COMM_DETERMINISTIC_CONFIG_NOT_SET;
    config->hcclCommName[0] = '\0';
    config->hcclUdi[0] = '\0';
    config->hcclOpExpansionMode = HCCL_COMM_DEFAULT_OP_EXPANSION_MODE;
    config->hcclRdmaTrafficClass = HCCL_COMM_TRAFFIC_CLASS_CONFIG_NOT_SET;
    config->hcclRdmaServiceLevel = HCCL_COMM_SERVICE_LEVEL_CONFIG_NOT_SET;
    config->hcclWorldRankID = 0;
    config->hcclJobID = 0;
    config->aclGraphZeroCopyEnable = 0;
    config->hcclExecTimeOut = HCCL_COMM_EXECTIMEOUT_CONFIG_NOT_SET;
    config->hcclAlgo[0] = '\0';
    config->hcclRetryEnable[0] = '\0';
    config->hcclRetryParams[0] = '\0';
    config->hcclBufferName[0] = '\0';
    config->hcclQos = HCCL_COMM_QOS_CONFIG_NOT_SET;
    config->hcclSymWinMaxMemSizePerRank = HCCL_DEFAULT_SYMMETRIC_MEMORY_STRIDE;
    config->hcclChannelSqDepth = HCCL_COMM_SQ_DEPTH_CONFIG_NOT_SET;
}

#ifdef __cplusplus
}
#endif
#endif /* HCCL_H_ */
