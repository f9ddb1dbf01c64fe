/*
 * hccl-rs: HCCL-compatible C API, communicator-level calls of HCCL's
 * hccl_comm.h (libhcomm upstream; implemented by libhccl here).
 */
#ifndef HCCL_COMM_H_
#define HCCL_COMM_H_

#include <stdbool.h>

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

#ifdef __cplusplus
}
#endif
#endif /* HCCL_COMM_H_ */
