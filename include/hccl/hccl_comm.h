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

#ifdef __cplusplus
}
#endif
#endif /* HCCL_COMM_H_ */
