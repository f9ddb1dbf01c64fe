"""PyTorch's fused symmetric-memory ops on CPU over the "hccl_rs" backend
(torch.ops.symm_mem.fused_matmul_reduce_scatter / fused_all_gather_matmul,
whose CPU kernels importing hccl_rs.torch registers): results against
torch references at p = 2 and 3, through the ProcessGroup subclass and
through the dispatcher's plain backend, sub-groups, errors, torchrun."""

import os
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from conftest import HERE, free_port  # noqa: E402


@pytest.mark.parametrize("p", [2, 3])
@pytest.mark.parametrize("scenario", ["matmul_reduce_scatter", "all_gather_matmul"])
def test_symm_mem_fused_ops(run, p, scenario):
    run(["torch_fused_worker.py", scenario], p, timeout=180, torch_env=True).check()


@pytest.mark.parametrize("scenario", ["matmul_reduce_scatter", "all_gather_matmul"])
def test_symm_mem_fused_ops_through_a_plain_backend(run, scenario):
    """HCCL_RS_TORCH_PG=0: the group is torch's ProcessGroup with an
    HcclRsBackend; the kernel finds the communicator through it."""
    run(["torch_fused_worker.py", scenario], 2, timeout=180, torch_env=True,
        env={"HCCL_RS_TORCH_PG": "0"}).check()


def test_symm_mem_fused_errors(run):
    run(["torch_fused_worker.py", "errors"], 2, timeout=120, torch_env=True).check()


def test_symm_mem_fused_on_a_subgroup(run):
    run(["torch_fused_worker.py", "subgroup"], 3, timeout=120, torch_env=True).check()


def test_symm_mem_fused_under_torchrun_nproc_2():
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or shutil.which("torchrun")
    assert torchrun, "torchrun not found beside the interpreter"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONFAULTHANDLER="1", HCCL_RS_TEST_TIMEOUT="110")
    cmd = [
        torchrun, "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
        "--master-port", str(free_port()), "torch_fused_worker.py", "torchrun_env",
    ]
    p = subprocess.Popen(cmd, cwd=HERE, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, 9)
            p.wait()
    assert p.returncode == 0, out[-5000:]
    for r in range(2):
        assert f"rank {r} ok: torchrun_env" in out, out[-5000:]
