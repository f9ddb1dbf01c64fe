"""The fused compute/communication ops from Python (hccl_rs.fused) across
processes: results against NumPy references at p = 2 and 3 with odd
shapes, padded rows, NumPy arrays and torch tensors (float32, float16,
bfloat16), each pipeline, ordering after async ops, and errors raised on
every rank."""

import pytest


@pytest.mark.parametrize("p", [2, 3])
def test_fused_ops_on_numpy(run, p):
    run(["fused_worker.py", "numpy"], p, timeout=180).check()


@pytest.mark.parametrize("p", [2, 3])
def test_fused_ops_on_torch_tensors(run, p):
    pytest.importorskip("torch")
    run(["fused_worker.py", "torch"], p, timeout=180).check()


@pytest.mark.parametrize("path", ["window", "stream", "unfused"])
def test_each_pipeline(run, path):
    """Each pipeline, all three ops with several blocks (AllGather+MatMul:
    4 blocks, more than the 3 stages), fresh outputs every op."""
    run(["fused_worker.py", "path", path], 2, timeout=120,
        env={"HCCL_RS_FUSED_PATH": path, "HCCL_RS_FUSED_BLOCK_ROWS": "32"}).check()


def test_stream_pipeline_one_stage(run):
    env = {"HCCL_RS_FUSED_PATH": "stream", "HCCL_RS_FUSED_STAGES": "1"}
    run(["fused_worker.py", "path", "stream"], 2, timeout=120, env=env).check()


def test_stream_pipeline_all_gather_matmul_as_many_blocks_as_stages(run):
    """Regression (hccl-fused): the peers' last blocks were skipped when
    the gathering finished before the multiplying."""
    env = {"HCCL_RS_FUSED_PATH": "stream", "HCCL_RS_FUSED_BLOCK_ROWS": "32"}
    run(["fused_worker.py", "ag_stream_blocks", "40"], 2, timeout=120, env=env).check()


@pytest.mark.parametrize("p", [2, 3])
def test_errors_raise_on_every_rank(run, p):
    run(["fused_worker.py", "errors"], p, timeout=120).check()


def test_a_fused_op_waits_for_async_ops_in_flight(run):
    run(["fused_worker.py", "after_async"], 2, timeout=60).check()
