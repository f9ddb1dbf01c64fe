/*
 * hccl-rs: HCCL-compatible C API (hccl_ex.h, the registration part),
 * implemented by libhccl, and hccl-rs's own extensions (HcclRs*).
 *
 * Registered memory (from aclrtMalloc) lets the communicator's ops reach
 * it from peer processes of this host through a mapping: one copy, no
 * system call per transfer, reductions straight out of the peer's buffer.
 */
#ifndef HCCL_EX_H
#define HCCL_EX_H

#include <stdint.h>

#include <hccl/hccl_types.h>
#include <acl/acl_base.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Registers [addr, addr+size) (inside one aclrtMalloc allocation) with the communicator; flag: 0. */
extern HcclResult HcclCommRegister(HcclComm comm, void *addr, uint64_t size, void **handle, uint32_t flag);

/** Undoes HcclCommRegister. */
extern HcclResult HcclCommDeregister(HcclComm comm, void *handle);

/**
 * Sends the registration's handle to each of peerRanks and maps theirs (each of
 * them calls this with this rank among its peers).
 */
extern HcclResult HcclCommExchangeMem(HcclComm comm, void *windowHandle, uint32_t *peerRanks,
    uint32_t peerRankNum);

/* ---- one-sided operations ------------------------------------------------ */

/** One transfer of HcclBatchPut / HcclBatchGet. */
typedef struct {
    void *localAddr;       /**< this rank's buffer */
    void *remoteAddr;      /**< an address in the remote rank's process, in memory it registered and exchanged */
    uint64_t count;        /**< elements */
    HcclDataType dataType; /**< element type */
} HcclOneSideOpDesc;

/**
 * Enqueues on stream one copy per descriptor from localAddr into remoteRank's
 * memory at remoteAddr (which remoteRank registered with HcclCommRegister and
 * exchanged with this rank by HcclCommExchangeMem): the peer's memory is mapped
 * here, so each copy is one memcpy. No synchronization with the peer is
 * implied. A peer on another host: HCCL_E_NOT_SUPPORT.
 */
extern HcclResult HcclBatchPut(HcclComm comm, uint32_t remoteRank, HcclOneSideOpDesc *desc, uint32_t descNum,
    aclrtStream stream);

/** As HcclBatchPut, copying from remoteRank's memory at remoteAddr into localAddr. */
extern HcclResult HcclBatchGet(HcclComm comm, uint32_t remoteRank, HcclOneSideOpDesc *desc, uint32_t descNum,
    aclrtStream stream);

/*
 * hccl-rs extensions (not in HCCL): diagnosis on request.
 */

/**
 * Writes the communicator's flight-recorder dump to path (JSON: its last ops, their
 * arguments and states, e.g. op "AllReduce", state "completed"). HCCL_E_PTR for a NULL
 * comm or path, HCCL_E_NOT_SUPPORT when recording is off (HCCL_RS_FR_BUFFER_SIZE=0),
 * HCCL_E_SYSCALL when the file cannot be written.
 */
extern HcclResult HcclRsDumpFlightRecorder(HcclComm comm, const char *path);

/**
 * Writes the timeline being recorded on the communicator's device (Chrome trace / Perfetto
 * JSON of its stream tasks and op spans) to path; recording goes on. HCCL_E_PTR for a NULL
 * comm or path, HCCL_E_NOT_SUPPORT when no timeline is on (neither HCCL_RS_TRACE nor
 * aclprofStart on the device), HCCL_E_SYSCALL when the file cannot be written.
 */
extern HcclResult HcclRsWriteTimeline(HcclComm comm, const char *path);

#ifdef __cplusplus
}
#endif

#endif /* HCCL_EX_H */
