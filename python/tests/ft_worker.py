"""Shrink and grow through the NumPy API, run by each rank
(``python ft_worker.py SCENARIO``; see test_ft.py).

A fresh process that joins a grown communicator is started by the
surviving rank 0 in rank 0's process group (no new session), so the
harness's kill of rank 0's group takes it down too if the test fails.
"""

import os
import signal
import subprocess
import sys
import time

import numpy as np
from worker_common import scenario

import hccl_rs

N = 1 << 16  # 256 KiB of float32: several chunks through the CCL buffers


def mine(rank, salt):
    """Rank ``rank``'s input: distinct per rank and per call, exact in float32."""
    return ((np.arange(N) % 7) + rank * 3 + salt).astype(np.float32)


def check_all_reduce(comm, ranks_by_new_rank, salt, what):
    """AllReduce on ``comm`` checked against the sum computed here, where
    ``ranks_by_new_rank[i]`` is the identity (original rank) of rank i."""
    x = mine(ranks_by_new_rank[comm.rank], salt)
    comm.all_reduce(x)
    want = np.sum([mine(q, salt) for q in ranks_by_new_rank], axis=0).astype(np.float32)
    assert np.array_equal(x, want), f"{what}: got {x[:8]}, want {want[:8]}"


def kill_shrink_grow():
    """4 ranks loop AllReduces; rank 3 is killed with SIGKILL; the others
    fail naming it, agree it is lost, shrink by agreement, AllReduce
    correctly on 3 ranks, then grow back to 4 with a fresh process."""
    comm = hccl_rs.Comm.from_env(exec_timeout=30)
    r, p = comm.rank, comm.size
    assert p == 4
    for step in range(3):
        check_all_reduce(comm, list(range(p)), step, f"step {step}")
    if r == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    t_kill = time.monotonic()
    try:
        for step in range(3, 50):
            check_all_reduce(comm, list(range(p)), step, f"step {step}")
    except hccl_rs.RemoteError as e:
        assert "rank 3" in str(e), str(e)
        print(f"rank {r} failed naming the lost rank: {e}")
    else:
        raise AssertionError("the killed rank went unnoticed")
    lost = comm.agree_lost(10.0)
    assert lost == [3], lost
    small = comm.shrink()  # by agreement
    took = time.monotonic() - t_kill
    assert (small.rank, small.size) == (r, 3), (small.rank, small.size)
    check_all_reduce(small, [0, 1, 2], 100, "shrunk")
    print(f"rank {r} shrunk: first correct op {took * 1e3:.1f} ms after its failure began")
    # a second op on the shrunk communicator, async this time
    x = mine(r, 101)
    small.all_reduce_async(x).wait()
    assert np.array_equal(x, np.sum([mine(q, 101) for q in range(3)], axis=0))

    # grow back to 4 with a fresh process as rank 3
    joiner = None
    if r == 0:
        gid = small.grow_id()
        assert isinstance(gid, bytes)
        env = dict(os.environ, RANK="3", HCCL_RS_GROW_ID=gid.hex())
        joiner = subprocess.Popen(
            [sys.executable, __file__, "join"], env=env,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        big = small.grow(4, gid)
    else:
        big = small.grow(4)
    assert (big.rank, big.size) == (r, 4), (big.rank, big.size)
    check_all_reduce(big, [0, 1, 2, 3], 200, "grown")
    big.barrier()
    if joiner is not None:
        out, err = joiner.communicate(timeout=60)
        assert joiner.returncode == 0, f"the joiner failed ({joiner.returncode}):\n{err}"
        assert "joiner ok" in out, out
        print(out.strip())
    for c in (big, small, comm):
        c.destroy()
    print(f"rank {r} grown: all_reduce over 4 correct")


def join():
    """The fresh process: rank 3 of the grown communicator."""
    gid = bytes.fromhex(os.environ["HCCL_RS_GROW_ID"])
    t0 = time.monotonic()
    big = hccl_rs.Comm.join_grown(4, gid, 3, connect_timeout=30, exec_timeout=30)
    assert (big.rank, big.size) == (3, 4)
    check_all_reduce(big, [0, 1, 2, 3], 200, "grown (joiner)")
    took = time.monotonic() - t0
    big.barrier()
    big.destroy()
    print(f"joiner ok: first correct op {took * 1e3:.1f} ms after joining began")


def told_shrink():
    """3 ranks; rank 1 is excluded by name (alive, it just leaves): the
    others shrink with the list and AllReduce correctly."""
    comm = hccl_rs.Comm.from_env(exec_timeout=30)
    r = comm.rank
    check_all_reduce(comm, [0, 1, 2], 0, "before")
    if r == 1:
        return
    try:
        comm.shrink([r])
    except hccl_rs.ParameterError as e:
        assert "in the exclude list" in str(e), str(e)
    else:
        raise AssertionError("an excluded rank's own shrink was accepted")
    try:
        comm.shrink([7])
    except hccl_rs.ParameterError as e:
        assert "out of range" in str(e), str(e)
    else:
        raise AssertionError("an out-of-range exclusion was accepted")
    small = comm.shrink([1])
    assert (small.rank, small.size) == ({0: 0, 2: 1}[r], 2)
    check_all_reduce(small, [0, 2], 1, "told shrink")
    small.destroy()
    comm.destroy()


def recover():
    """3 ranks: a count mismatch (rank 1 passes fewer elements) fails the
    op on every rank; all recover and AllReduce correctly on the same
    object. Then rank 2 comes 800 ms late under a 300 ms exec timeout: the
    others time out; all recover and AllReduce correctly again."""
    comm = hccl_rs.Comm.from_env(exec_timeout=30)
    r = comm.rank
    x = np.ones(1000 if r != 1 else 900, np.float32)
    try:
        comm.all_reduce(x)
    except hccl_rs.HcclError as e:
        assert "inconsistent between ranks" in str(e), str(e)
    else:
        raise AssertionError("a mismatched AllReduce succeeded")
    t = time.monotonic()
    comm.recover()
    print(f"rank {r} recovered after the mismatch in {(time.monotonic() - t) * 1e3:.1f} ms")
    check_all_reduce(comm, [0, 1, 2], 1, "after recovering from a mismatch")
    comm.set_exec_timeout(0.3)
    if r == 2:
        time.sleep(0.8)
    try:
        comm.all_reduce(mine(r, 2))
        late_ok = True
    except hccl_rs.HcclError as e:
        assert "timeout" in str(e).lower(), str(e)
        late_ok = False
    # the late rank may find its op complete (the others left their parts)
    assert late_ok is False or r == 2, "a rank that waited for the late one did not time out"
    comm.set_exec_timeout(30)
    comm.recover()
    assert comm.recoveries() == 2
    check_all_reduce(comm, [0, 1, 2], 3, "after recovering from a timeout")
    comm.barrier()
    comm.destroy()
    print(f"rank {r} ok: recover")


def bad_ids():
    """Arguments refused before anything waits (one rank is enough)."""
    comm = hccl_rs.Comm.from_env()
    for call in (lambda: comm.grow(2, b"short"), lambda: hccl_rs.Comm.join_grown(2, b"x" * 3, 1)):
        try:
            call()
        except hccl_rs.ParameterError as e:
            assert "bytes grow_id() returned, got" in str(e), str(e)
        else:
            raise AssertionError("a malformed grow id was accepted")
    try:
        comm.grow(1, comm.grow_id())
    except hccl_rs.ParameterError as e:
        assert "has 1 already" in str(e), str(e)
    else:
        raise AssertionError("growing to no more ranks was accepted")
    try:
        comm.agree_lost(-1)
    except hccl_rs.ParameterError as e:
        assert "must be positive" in str(e), str(e)
    else:
        raise AssertionError("a negative timeout was accepted")
    assert comm.agree_lost(1.0) == []
    comm.destroy()
    try:
        comm.shrink()
    except hccl_rs.ParameterError as e:
        assert "destroyed" in str(e), str(e)
    else:
        raise AssertionError("a destroyed communicator shrank")


if __name__ == "__main__":
    scenario(
        {
            "kill_shrink_grow": kill_shrink_grow,
            "join": join,
            "told_shrink": told_shrink,
            "bad_ids": bad_ids,
            "recover": recover,
        }
    )
