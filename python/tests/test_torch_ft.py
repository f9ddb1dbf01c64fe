"""The torch backend under torchft (issue 32, "Fault tolerance"):
allreduce_coalesced, the capabilities torch probes, reconfigure refused,
exception types, Ctrl-C during set-up, and which thread is pinned."""

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("p", [2, 3])
@pytest.mark.parametrize("through", ["process_group", "dispatcher"])
def test_allreduce_coalesced(run, p, through):
    env = {"HCCL_RS_TORCH_PG": "0"} if through == "dispatcher" else {}
    run(["torch_ft_worker.py", "coalesced"], p, timeout=120, torch_env=True, env=env).check()


@pytest.mark.parametrize("through", ["process_group", "dispatcher"])
def test_capabilities_torch_probes_answer(run, through):
    env = {"HCCL_RS_TORCH_PG": "0"} if through == "dispatcher" else {}
    run(["torch_ft_worker.py", "capabilities"], 2, timeout=90, torch_env=True, env=env).check()


def test_enable_reconfigure_is_refused(run):
    ranks = run(["torch_ft_worker.py", "reconfigure_refused"], 2, timeout=90, torch_env=True).check()
    import inspect

    import torch.distributed as dist

    if "enable_reconfigure" in inspect.signature(dist.init_process_group).parameters:
        assert "skip" not in ranks.out(0), ranks.out(0)


@pytest.mark.parametrize("through", ["process_group", "dispatcher"])
def test_errors_through_torch_are_dist_backend_errors(run, through):
    # rank 1 skips an op: rank 0 times out after HCCL_EXEC_TIMEOUT
    env = {"HCCL_EXEC_TIMEOUT": "3"}
    if through == "dispatcher":
        env["HCCL_RS_TORCH_PG"] = "0"
    run(["torch_ft_worker.py", "error_types"], 2, timeout=90, torch_env=True, env=env).check()


def test_numpy_path_errors_are_runtime_errors():
    """Without torch (not even imported), an hccl_rs error is a
    RuntimeError, of its own class."""
    code = (
        "import sys, hccl_rs\n"
        "try:\n"
        "    hccl_rs.Comm(2, b'short', 0)\n"
        "except RuntimeError as e:\n"
        "    assert isinstance(e, hccl_rs.ParameterError) and isinstance(e, ValueError), type(e).__mro__\n"
        "    assert 'root_info must be' in str(e), e\n"
        "else:\n"
        "    raise AssertionError('bad root info was taken')\n"
        "assert 'torch' not in sys.modules, 'hccl_rs imported torch'\n"
        "print('ok')\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stdout + p.stderr
