"""The "hccl_rs" torch.distributed backend: every collective against
references at p = 2, 3, 4 (every dtype and operator), groups, point to
point, async Works and futures, errors, and a torchrun launch."""

import os
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from conftest import HERE, free_port  # noqa: E402


@pytest.mark.parametrize("p", [2, 3, 4])
def test_every_collective(run, p):
    run(["torch_worker.py", "collectives"], p, timeout=240, torch_env=True).check()


def test_every_collective_through_the_dispatcher(run):
    """HCCL_RS_TORCH_PG=0: a plain c10d Backend, reached through torch's
    dispatcher for every op."""
    run(["torch_worker.py", "collectives"], 2, timeout=240, torch_env=True,
        env={"HCCL_RS_TORCH_PG": "0"}).check()


def test_exit_after_a_future(run):
    for _ in range(3):  # the abort it guards against was not every time
        run(["torch_worker.py", "future_then_exit"], 2, timeout=60, torch_env=True).check()


def test_errors_are_typed(run):
    run(["torch_worker.py", "errors"], 2, torch_env=True).check()


def test_torchrun_nproc_4():
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or shutil.which("torchrun")
    assert torchrun, "torchrun not found beside the interpreter"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONFAULTHANDLER="1", HCCL_RS_TEST_TIMEOUT="200")
    cmd = [
        torchrun, "--nproc-per-node", "4", "--master-addr", "127.0.0.1",
        "--master-port", str(free_port()), "torch_worker.py", "torchrun_env",
    ]
    p = subprocess.Popen(cmd, cwd=HERE, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=240)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, 9)
            p.wait()
    assert p.returncode == 0, out[-5000:]
    for r in range(4):
        assert f"rank {r} ok: torchrun_env" in out, out[-5000:]
