#!/usr/bin/env python3
"""AllReduce across processes from Python through ctypes and libhccl.

The parent creates the root info (HcclGetRootInfo) and starts one process
per rank; each joins with HcclCommInitRootInfo, runs an fp32 sum AllReduce
on its stream and checks the result. No third-party packages.

Usage: python3 allreduce.py [--ranks N] [--count C] [--lib PATH/libhccl.so]
The library is found with --lib, $HCCL_LIB, or ctypes' search for "hccl".
"""
import argparse
import ctypes
import ctypes.util
import multiprocessing as mp
import os
import sys

HCCL_ROOT_INFO_BYTES = 4108
HCCL_DATA_TYPE_FP32 = 4
HCCL_REDUCE_SUM = 0
ACL_MEMCPY_HOST_TO_DEVICE = 1
ACL_MEMCPY_DEVICE_TO_HOST = 2


class HcclRootInfo(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * HCCL_ROOT_INFO_BYTES)]


def load(path):
    """Loads libhccl and declares the signatures used here."""
    path = path or os.environ.get("HCCL_LIB") or ctypes.util.find_library("hccl")
    if not path:
        sys.exit("libhccl not found: pass --lib or set HCCL_LIB")
    lib = ctypes.CDLL(path)
    vp, u32, u64 = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint64
    sigs = {
        "HcclGetRootInfo": [ctypes.POINTER(HcclRootInfo)],
        "HcclCommInitRootInfo": [u32, ctypes.POINTER(HcclRootInfo), u32, ctypes.POINTER(vp)],
        "HcclAllReduce": [vp, vp, u64, u32, u32, vp, vp],
        "HcclCommDestroy": [vp],
        "HcclGetErrorString": [u32],
        "aclrtSetDevice": [ctypes.c_int32],
        "aclrtCreateStream": [ctypes.POINTER(vp)],
        "aclrtDestroyStream": [vp],
        "aclrtSynchronizeStream": [vp],
        "aclrtMalloc": [ctypes.POINTER(vp), ctypes.c_size_t, u32],
        "aclrtFree": [vp],
        "aclrtMemcpy": [vp, ctypes.c_size_t, vp, ctypes.c_size_t, u32],
    }
    for name, args in sigs.items():
        f = getattr(lib, name)
        f.argtypes = args
        f.restype = ctypes.c_int
    lib.HcclGetErrorString.restype = ctypes.c_char_p
    return lib


def check(lib, rc, what):
    if rc != 0:
        text = lib.HcclGetErrorString(rc).decode() if rc < 100 else "acl error"
        raise RuntimeError(f"{what} failed: {rc} ({text})")


def rank_main(lib_path, root_bytes, nranks, rank, count, results):
    lib = load(lib_path)
    try:
        root = HcclRootInfo()
        ctypes.memmove(ctypes.byref(root), root_bytes, HCCL_ROOT_INFO_BYTES)
        check(lib, lib.aclrtSetDevice(rank % 8), "aclrtSetDevice")
        stream, comm = ctypes.c_void_p(), ctypes.c_void_p()
        check(lib, lib.aclrtCreateStream(ctypes.byref(stream)), "aclrtCreateStream")
        check(lib, lib.HcclCommInitRootInfo(nranks, ctypes.byref(root), rank, ctypes.byref(comm)),
              "HcclCommInitRootInfo")
        nbytes = 4 * count
        send, recv = ctypes.c_void_p(), ctypes.c_void_p()
        check(lib, lib.aclrtMalloc(ctypes.byref(send), nbytes, 0), "aclrtMalloc")
        check(lib, lib.aclrtMalloc(ctypes.byref(recv), nbytes, 0), "aclrtMalloc")
        host = (ctypes.c_float * count)(*[float(rank + 1) * (i % 5) for i in range(count)])
        check(lib, lib.aclrtMemcpy(send, nbytes, host, nbytes, ACL_MEMCPY_HOST_TO_DEVICE), "aclrtMemcpy")
        check(lib, lib.HcclAllReduce(send, recv, count, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, stream),
              "HcclAllReduce")
        check(lib, lib.aclrtSynchronizeStream(stream), "aclrtSynchronizeStream")
        out = (ctypes.c_float * count)()
        check(lib, lib.aclrtMemcpy(out, nbytes, recv, nbytes, ACL_MEMCPY_DEVICE_TO_HOST), "aclrtMemcpy")
        total = nranks * (nranks + 1) // 2
        wrong = sum(1 for i in range(count) if out[i] != float(total * (i % 5)))
        check(lib, lib.aclrtFree(send), "aclrtFree")
        check(lib, lib.aclrtFree(recv), "aclrtFree")
        check(lib, lib.HcclCommDestroy(comm), "HcclCommDestroy")
        check(lib, lib.aclrtDestroyStream(stream), "aclrtDestroyStream")
        results.put((rank, wrong, None))
    except Exception as e:  # reported by the parent
        results.put((rank, -1, str(e)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--count", type=int, default=10000)
    ap.add_argument("--lib", default=None)
    ap.add_argument("--timeout", type=float, default=120.0)
    a = ap.parse_args()

    lib = load(a.lib)
    root = HcclRootInfo()
    check(lib, lib.HcclGetRootInfo(ctypes.byref(root)), "HcclGetRootInfo")
    root_bytes = ctypes.string_at(ctypes.byref(root), HCCL_ROOT_INFO_BYTES)

    ctx = mp.get_context("spawn")  # no fork of a process with library threads
    results = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(a.lib, root_bytes, a.ranks, r, a.count, results))
             for r in range(a.ranks)]
    for p in procs:
        p.start()
    failed = 0
    try:
        for _ in procs:
            rank, wrong, err = results.get(timeout=a.timeout)
            if err or wrong:
                print(f"rank {rank}: {err or f'{wrong} wrong elements'}", file=sys.stderr)
                failed += 1
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                failed += 1
    if failed:
        print(f"FAILED: {failed} rank(s)")
        return 1
    print(f"OK: {a.ranks} processes, fp32 sum allreduce of {a.count} elements checked (ctypes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
