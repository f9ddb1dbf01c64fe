/*
 * hccl-rs: HCCL-compatible C API (hccl_ex.h, the registration part),
 * implemented by libhccl.
 *
 * Registered memory (from aclrtMalloc) lets the communicator's ops reach
 * it from peer processes of this host through a mapping: one copy, no
 * system call per transfer, reductions straight out of the peer's buffer.
 */
#ifndef HCCL_EX_H
#define HCCL_EX_H

#include <stdint.h>

#include <hccl/hccl_types.h>

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

#ifdef __cplusplus
}
#endif

#endif /* HCCL_EX_H */
