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
