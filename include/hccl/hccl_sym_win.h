/*
 * hccl-rs: HCCL-compatible C API (hccl_sym_win.h), implemented by libhccl.
 *
 * Addresses in symmetric windows (registered with HcclCommSymWinRegister,
 * <hccl/hccl.h>). On CPUs the peers' windows on this host are mapped into
 * this process: loads and stores through the pointer reach the peer's
 * memory. Ranks on other hosts are not addressable (HCCL_E_NOT_SUPPORT).
 */
#ifndef HCCL_SYM_WIN_H
#define HCCL_SYM_WIN_H

#include <stddef.h>
#include <stdint.h>

#include <hccl/hccl_types.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The address of byte `offset` of rank `peerRank`'s part of the window, in this process. */
extern HcclResult HcclSymWinGetPeerPointer(HcclCommSymWindow winHandle, size_t offset, uint32_t peerRank,
    void **ptr);

#ifdef __cplusplus
}
#endif

#endif /* HCCL_SYM_WIN_H */
