/*
 * hccl-rs: HCCL-compatible C API, communicator-level calls of HCCL's
 * hccl_comm.h (libhcomm upstream; implemented by libhccl here).
 */
#ifndef HCCL_COMM_H_
#define HCCL_COMM_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hccl/hccl_types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- group calls ---------------------------------------------------------
 * HCCL calls a thread issues between HcclGroupStart and the matching
 * HcclGroupEnd are checked when issued (a bad argument fails that call and
 * nothing of it is kept) and launched together at the outermost end: the
 * sends and receives of one communicator and stream as one batch whose
 * pairs cannot deadlock, consecutive small AllReduces of one communicator
 * and stream with the same type and operation fused into one. Groups nest
 * and belong to the calling thread. */

/** Starts (or nests) a group on the calling thread. */
extern HcclResult HcclGroupStart(void);

/** Ends a group; the outermost end launches its calls and returns the first launch error.
 * HCCL_E_PARA without a matching start. */
extern HcclResult HcclGroupEnd(void);

/** Whether the calling thread is inside a group. */
extern HcclResult HcclGroupStatusGet(bool *inGroup);

/* ---- symmetric windows ----------------------------------------------------- */

/**
 * Registers [addr, addr+size) as this rank's part of a symmetric window:
 * collective, every rank with the same size; the memory must come from
 * aclrtMalloc. flag: 0 or HCCL_WIN_COLL_SYMMETRIC (1). The peers' parts on
 * this host are then addressable (HcclSymWinGetPeerPointer, <hccl/hccl_sym_win.h>).
 */
extern HcclResult HcclCommSymWinRegister(HcclComm comm, void *addr, uint64_t size,
    HcclCommSymWindow *winHandle, uint32_t flag);

/** Deregisters a symmetric window (collective). */
extern HcclResult HcclCommSymWinDeregister(HcclCommSymWindow winHandle);

/** The window holding [ptr, ptr+size) on this rank, and the offset of ptr in it. */
extern HcclResult HcclCommSymWinGet(HcclComm comm, void *ptr, size_t size, HcclCommSymWindow *winHandle,
    size_t *offset);

/* ---- state: suspend, resume, status, callbacks ------------------------------ */

/**
 * Suspends the communicator: later ops on it (collectives, send/receive,
 * one-sided) fail with HCCL_E_SUSPENDING and enqueue nothing; ops already
 * enqueued run to completion. Idempotent.
 */
extern HcclResult HcclCommSuspend(HcclComm comm);

/** Called on state changes of every communicator: comm, phase, the registered args. */
typedef HcclResult (*HcclCommStateCallback)(HcclComm comm, HcclCommStatePhase state, void *args);

/**
 * Registers (or, for a regName registered before, replaces) a process-wide
 * callback, called before and after HcclCommDestroy and HcclCommResume of any
 * communicator. A callback's failure is logged and does not stop the call.
 */
extern HcclResult HcclCommRegCommStateCallback(const char *regName, HcclCommStateCallback cb, void *args);

/** Undoes HcclCommSuspend: ops are accepted again. */
extern HcclResult HcclCommResume(HcclComm comm);

/** The state of the communicator named commId (HcclGetCommName) in this process. */
extern HcclResult HcclCommGetStatus(const char *commId, HcclCommStatus *status);

/**
 * The communicator named commName in this process. Several of this process
 * with that name (threads as ranks): the one created on the calling thread's
 * current device; HCCL_E_NOT_FOUND if none.
 */
extern HcclResult HcclCommGetHandleWithName(const char *commName, HcclComm *comm);

/**
 * Switches ranks[i] to its backup NIC when useBackup[i]. CPUs have no device
 * NICs: checked, recorded and logged; nothing changes.
 */
extern HcclResult HcclCommWorkingDevNicSet(HcclComm comm, uint32_t *ranks, bool *useBackup, uint32_t nRanks);

/* ---- configuration queries ------------------------------------------------- */

typedef enum {
    HCCL_OP_EXPANSION_MODE_INVALID = -1,
    HCCL_OP_EXPANSION_MODE_AI_CPU = 0,
    HCCL_OP_EXPANSION_MODE_AIV = 1,
    HCCL_OP_EXPANSION_MODE_HOST = 2,
    HCCL_OP_EXPANSION_MODE_HOST_TS = 3,
    HCCL_OP_EXPANSION_MODE_CCU_MS = 4,
    HCCL_OP_EXPANSION_MODE_CCU_SCHED = 5,
    HCCL_OP_EXPANSION_AIV_ONLY = 6
} HcclOpExpansionMode;

typedef enum {
    HCCL_CONFIG_TYPE_INVALID = -1,
    HCCL_CONFIG_TYPE_OP_EXPANSION_MODE = 0
} HcclConfigType;

typedef HcclOpExpansionMode HcclConfigTypeOpExpansionMode;

/**
 * Reads a configuration item of the communicator into info (infoLen bytes).
 * HCCL_CONFIG_TYPE_OP_EXPANSION_MODE: an HcclOpExpansionMode, always
 * HCCL_OP_EXPANSION_MODE_HOST here (ops are expanded on the host CPU).
 */
extern HcclResult HcclConfigGetInfo(HcclComm comm, HcclConfigType cfgType, uint32_t infoLen, void *info);

#ifdef __cplusplus
}
#endif
#endif /* HCCL_COMM_H_ */
