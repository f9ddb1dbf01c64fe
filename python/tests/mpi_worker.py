"""Scenarios run by each rank under ``mpirun`` (see test_mpirun.py), with
no torch or hccl_rs variable set by hand: the launcher's own
(OMPI_COMM_WORLD_*, PMIX_*) must be enough."""

import os
import sys

from worker_common import scenario

# what the harness asserts was not given by hand
TORCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def _untouched():
    given = [k for k in TORCH_VARS if k in os.environ]
    assert not given, f"set before hccl_rs filled them: {given}"
    return int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"])


def torch_backend():
    """init_process_group("hccl_rs") with the launcher's variables only."""
    mr, mp = _untouched()
    import hccl_rs.torch  # noqa: F401  (fills the env:// variables, registers)

    import torch
    import torch.distributed as dist

    assert os.environ["RANK"] == str(mr) and os.environ["WORLD_SIZE"] == str(mp), os.environ
    assert os.environ["LOCAL_RANK"] == os.environ["OMPI_COMM_WORLD_LOCAL_RANK"]
    assert os.environ["LOCAL_WORLD_SIZE"] == str(mp)
    assert os.environ["MASTER_ADDR"] == "127.0.0.1"
    dist.init_process_group("hccl_rs")
    r, p = dist.get_rank(), dist.get_world_size()
    assert (r, p) == (mr, mp), (r, p)
    t = torch.full((5,), float(r + 1))
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((5,), p * (p + 1) / 2)), t
    outs = [torch.zeros(3, dtype=torch.int64) for _ in range(p)]
    dist.all_gather(outs, torch.arange(3) + 10 * r)
    for q in range(p):
        assert torch.equal(outs[q], torch.arange(3) + 10 * q), outs
    b = torch.arange(4.0) * (r + 1)
    dist.broadcast(b, src=p - 1)
    assert torch.equal(b, torch.arange(4.0) * p), b
    # Comm.from_env() beside torch's store (MASTER_PORT + 1)
    import hccl_rs

    comm = hccl_rs.Comm.from_env()
    x = torch.full((2,), float(r))
    comm.all_reduce(x, op="max")
    assert torch.equal(x, torch.full((2,), float(p - 1))), x
    comm.destroy()
    dist.destroy_process_group()
    os.environ["RANK"] = str(r)  # for the "ok" line


def from_env():
    """hccl_rs.Comm.from_env() with the launcher's variables only (NumPy)."""
    mr, mp = _untouched()
    import numpy as np

    import hccl_rs

    comm = hccl_rs.Comm.from_env()
    assert (comm.rank, comm.size) == (mr, mp)
    assert os.environ["HCCL_RS_LAUNCHER"] == "mpirun"
    x = np.arange(6, dtype=np.float64) * (comm.rank + 1)
    comm.all_reduce(x)
    np.testing.assert_array_equal(x, np.arange(6) * mp * (mp + 1) / 2)
    y = np.empty(2 * mp, np.int32)
    comm.all_gather(np.full(2, comm.rank, np.int32), y)
    np.testing.assert_array_equal(y, np.repeat(np.arange(mp), 2))
    comm.destroy()


if __name__ == "__main__":
    scenario({"torch_backend": torch_backend, "from_env": from_env})
    sys.stdout.flush()
