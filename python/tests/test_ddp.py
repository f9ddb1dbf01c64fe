"""DistributedDataParallel on hccl_rs ends where it ends on Gloo: the same
small model trained from the same seed on the same data, weights equal
within fp32 tolerance."""

import pytest

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("pg", ["process_group", "backend"])
@pytest.mark.parametrize("p", [2])
def test_ddp_matches_gloo(run, tmp_path, p, pg):
    """``pg``: hccl_rs as the ProcessGroup subclass (the default), or as a
    c10d Backend reached through torch's dispatcher (HCCL_RS_TORCH_PG=0)."""
    weights = {}
    env = {"HCCL_RS_TORCH_PG": "1" if pg == "process_group" else "0"}
    for backend in ("gloo", "hccl_rs"):
        out = tmp_path / f"{backend}.pt"
        run(["torch_worker.py", "ddp", backend, out, "30"], p, timeout=180, torch_env=True,
            env=env).check()
        weights[backend] = torch.load(out)
    a, b = weights["gloo"], weights["hccl_rs"]
    assert a.keys() == b.keys()
    moved = 0.0
    for k in a:
        assert torch.allclose(a[k], b[k], rtol=1e-4, atol=1e-5), (k, (a[k] - b[k]).abs().max())
        moved += float(a[k].abs().sum())
    assert moved > 0
