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

/*
 * hccl-rs extensions (not in HCCL): fault tolerance: per-communicator timeouts in
 * milliseconds, revocation, shrinking, growing.
 */

/**
 * Bounds every wait of the communicator's ops from now on to timeoutMs milliseconds
 * (0 = forever): a wait that outlasts it fails the op with HCCL_E_TIMEOUT naming the peer
 * awaited. HCCL_EXEC_TIMEOUT (seconds, the whole process, at creation) is the default;
 * HCCL_RS_EXEC_TIMEOUT_MS its millisecond form. HCCL_E_PTR for a NULL comm.
 */
extern HcclResult HcclRsCommSetExecTimeout(HcclComm comm, uint64_t timeoutMs);

/**
 * The bound in force, in milliseconds (0 = forever). HCCL_E_PTR for a NULL comm or timeoutMs.
 */
extern HcclResult HcclRsCommGetExecTimeout(HcclComm comm, uint64_t *timeoutMs);

/**
 * Revokes the communicator on every rank (NCCL's ncclCommRevoke): in-flight ops of every rank
 * end promptly with HCCL_E_SUSPENDING ("revoked by rank R: reason"), later ops are refused the
 * same way; HcclGetCommAsyncError reports it; only status calls and HcclCommDestroy remain.
 * The revocation reaches every rank even if this one dies right after. reason may be NULL.
 * HCCL_E_PTR for a NULL comm.
 */
extern HcclResult HcclRsCommRevoke(HcclComm comm, const char *reason);

/**
 * Makes the communicator usable again after a failed op (a timeout, an argument mismatch between
 * ranks, a peer's failure): every rank calls it, and the communicator is rebuilt for the same
 * ranks over its control plane (fresh links, buffers and device, ~10 ms); comm stays valid, keeps
 * its name, ranks, exec timeout and registered memory, and its later ops run on the rebuilt one.
 * Streams follow to the new device at their next HCCL call. The application decides what to run
 * again (a rank whose op completed before a peer failed does not know the others' failed).
 * HCCL_E_REMOTE naming a peer lost meanwhile (shrink without it instead); HCCL_E_NOT_SUPPORT
 * for a communicator from a rank table; HCCL_E_PTR for a NULL comm.
 */
extern HcclResult HcclRsCommRecover(HcclComm comm);

/**
 * Shrinks the communicator (NCCL's ncclCommShrink): the ranks not listed in excludeRanks each
 * call this (the excluded never do, and may be dead) and get *newComm, a communicator of the
 * survivors numbered in their order, with this one's configuration; no new root info (the
 * survivors meet over the communicator's control plane). excludeRanks NULL with excludeCount 0:
 * the survivors agree among themselves which ranks are lost and exclude those (ULFM's shrink).
 * The old communicator stays; revoke it to end ops in flight, destroy it after. Memory registered
 * with it stays registered with *newComm. For ranks that are processes of a communicator from
 * root info or launcher variables, and for threads of one process (HcclCommInitAll, or threads
 * with one root info: the first survivor to call decides); HCCL_E_NOT_SUPPORT for a
 * communicator from a rank table. HCCL_E_PTR for a NULL comm or newComm (or a NULL list with a
 * non-zero count), HCCL_E_PARA for a bad list (this rank in it, a rank twice or out of range),
 * HCCL_E_REMOTE naming a survivor lost during the shrink.
 */
extern HcclResult HcclRsCommShrink(HcclComm comm, const uint32_t *excludeRanks, uint32_t excludeCount,
    HcclComm *newComm);

/**
 * Grows the communicator with new ranks (NCCL's ncclCommGrow). One member makes a single-use id
 * with HcclRsCommGrowId (a rendezvous on its host, open for HCCL_CONNECT_TIMEOUT) and hands it to
 * the new processes, which join with HcclCommInitRootInfo(nRanks, &growId, rank, &comm) as ranks
 * size .. nRanks-1. Every member calls HcclRsCommGrow, the maker passing growId and the others
 * NULL (they receive it over the control plane); members keep their ranks in *newComm. The old
 * communicator stays. For process ranks and for threads of one process (new threads join
 * with HcclCommInitRootInfo and the id, as new processes do); HCCL_E_NOT_SUPPORT for a
 * communicator from a rank table. HCCL_E_PARA when nRanks is not larger than
 * the size, or when no member or several passed an id.
 */
extern HcclResult HcclRsCommGrowId(HcclComm comm, HcclRootInfo *growId);
extern HcclResult HcclRsCommGrow(HcclComm comm, uint32_t nRanks, const HcclRootInfo *growId,
    HcclComm *newComm);

/*
 * hccl-rs extensions (not in HCCL): fused compute/communication ops (HCCL's MC2 ops
 * on CPUs; see docs/c-api.md).
 *
 * Matrices are row-major with a leading dimension in elements (lda >= the columns,
 * and so on), of HCCL_DATA_TYPE_FP32, HCCL_DATA_TYPE_BFP16 or HCCL_DATA_TYPE_FP16
 * (products accumulate in fp32), in aclrtMalloc memory or any host memory. The
 * output must not overlap an operand.
 *
 * Stream-ordered like the HCCL ops, but synchronous: each call first waits for the
 * work already enqueued on stream (which may produce the operands), then runs the
 * fused op on the calling thread and returns once it is done (the output is ready;
 * work enqueued on stream afterwards sees it). A capturing stream is refused
 * (HCCL_E_NOT_SUPPORT, the capture is invalidated). Collective: every rank of comm
 * calls the same op with the same k and n (and, but for HcclRsAllGatherMatmul, m).
 *
 * Errors: HCCL_E_PTR for a NULL comm or a NULL matrix that has elements;
 * HCCL_E_PARA for an unknown handle, an unsupported data type, a leading dimension
 * smaller than its columns, overlapping operands, or shapes that differ across ranks.
 * A rank whose own arguments are wrong still joins the op, so that every rank fails
 * together (it returns its own error, its peers HCCL_E_PARA naming it); no rank then
 * writes its output.
 */

/**
 * MatMul+ReduceScatter: every rank holds a (m x k) and b (k x n); rank r receives in
 * out its rows of sum over ranks q of A_q * B_q. The first (m mod rankSize) ranks get
 * ceil(m / rankSize) rows, the others floor(m / rankSize): out is that many rows x n.
 */
extern HcclResult HcclRsMatmulReduceScatter(const void *a, const void *b, void *out, uint64_t m,
    uint64_t k, uint64_t n, uint64_t lda, uint64_t ldb, uint64_t ldc, HcclDataType dataType,
    HcclComm comm, aclrtStream stream);

/**
 * AllGather+MatMul: every rank holds its row shard a (m x k; m may differ by rank, rank
 * order is row order) and b (k x n); every rank receives (A gathered by rows) * B in out
 * (M x n, M the sum of the ranks' m) and, unless gatheredA is NULL, the gathered A
 * itself in gatheredA (M x k, leading dimension ldg; ignored when gatheredA is NULL).
 */
extern HcclResult HcclRsAllGatherMatmul(const void *a, const void *b, void *out, void *gatheredA,
    uint64_t m, uint64_t k, uint64_t n, uint64_t lda, uint64_t ldb, uint64_t ldc, uint64_t ldg,
    HcclDataType dataType, HcclComm comm, aclrtStream stream);

/**
 * MatMul+AllReduce: every rank holds a (m x k) and b (k x n); every rank receives the
 * sum over ranks q of A_q * B_q in out (m x n).
 */
extern HcclResult HcclRsMatmulAllReduce(const void *a, const void *b, void *out, uint64_t m,
    uint64_t k, uint64_t n, uint64_t lda, uint64_t ldb, uint64_t ldc, HcclDataType dataType,
    HcclComm comm, aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif /* HCCL_EX_H */
