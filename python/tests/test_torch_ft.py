"""The torch backend under torchft (issue 32, "Fault tolerance"):
allreduce_coalesced, the capabilities torch probes, reconfigure refused,
exception types, Ctrl-C during set-up, and which thread is pinned."""

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
