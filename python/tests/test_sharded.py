"""PyTorch's sharded training on the "hccl_rs" backend, each checked
against Gloo from the same seed (issue 31): FSDP2 with and without
prefetching at p = 2 and 4, torch.distributed.checkpoint of FSDP2 state,
DTensor tensor parallelism, in-place AllGather / ReduceScatter (FSDP2's
forms), object collectives, monitored_barrier and subgroups, and
Lightning's DDPStrategy. Step times of both backends are printed
(``pytest -s``) for docs/python.md; nothing here asserts a speed."""

import json
import statistics

import pytest

torch = pytest.importorskip("torch")


def compare(a, b, rtol=1e-4, atol=1e-5):
    assert a.keys() == b.keys()
    moved = 0.0
    for k in a:
        assert torch.allclose(a[k].float(), b[k].float(), rtol=rtol, atol=atol), (
            k, (a[k].float() - b[k].float()).abs().max())
        moved += float(a[k].float().abs().sum())
    assert moved > 0


def step_times(path):
    """Median step time over ranks and steps after the first (warm-up), ms."""
    with open(str(path) + ".json") as f:
        ranks = json.load(f)
    return statistics.median(t * 1e3 for r in ranks for t in r["times"][1:])


def both(run, tmp_path, p, args, timeout=240):
    """Runs ``sharded_worker.py args[0] BACKEND out args[1:]`` on both
    backends; returns {backend: (state, out path)}."""
    res = {}
    for backend in ("gloo", "hccl_rs"):
        out = tmp_path / f"{args[0]}-{backend}.pt"
        run(["sharded_worker.py", args[0], backend, out, *args[1:]], p, timeout=timeout,
            torch_env=True).check()
        res[backend] = (torch.load(out), out)
    return res


@pytest.mark.parametrize("p,prefetch", [(2, "1"), (2, "0"), (4, "1")])
def test_fsdp2_matches_gloo(run, tmp_path, p, prefetch):
    res = both(run, tmp_path, p, ["fsdp2", "6", prefetch])
    compare(res["gloo"][0], res["hccl_rs"][0])
    g, h = step_times(res["gloo"][1]), step_times(res["hccl_rs"][1])
    print(f"\nFSDP2 p={p} prefetch={prefetch}: step p50 gloo {g:.2f} ms, hccl_rs {h:.2f} ms "
          f"(hccl_rs/gloo {h / g:.2f})")


@pytest.mark.parametrize("p", [2, 4])
def test_dcp_save_load_of_fsdp2_state(run, tmp_path, p):
    res = {}
    for backend in ("gloo", "hccl_rs"):
        ckpt = tmp_path / f"ckpt-{backend}"
        out = tmp_path / f"dcp-{backend}.pt"
        run(["sharded_worker.py", "dcp", backend, ckpt, out, "3"], p, timeout=240,
            torch_env=True).check()
        assert any(ckpt.iterdir()), "the checkpoint directory is empty"
        res[backend] = torch.load(out)
    compare(res["gloo"], res["hccl_rs"])


@pytest.mark.parametrize("p", [2, 4])
def test_tensor_parallel_matches_gloo(run, tmp_path, p):
    res = both(run, tmp_path, p, ["tp", "6"])
    compare(res["gloo"][0], res["hccl_rs"][0])
    g, h = step_times(res["gloo"][1]), step_times(res["hccl_rs"][1])
    print(f"\nDTensor TP p={p}: step p50 gloo {g:.2f} ms, hccl_rs {h:.2f} ms "
          f"(hccl_rs/gloo {h / g:.2f})")


@pytest.mark.parametrize("p", [2, 3, 4])
def test_in_place_all_gather_and_reduce_scatter(run, p):
    run(["sharded_worker.py", "in_place", "hccl_rs"], p, timeout=180, torch_env=True).check()


@pytest.mark.parametrize("p", [2, 3])
def test_object_collectives_and_subgroups(run, p):
    run(["sharded_worker.py", "objects", "hccl_rs"], p, timeout=120, torch_env=True).check()


def test_monitored_barrier_names_the_missing_rank(run):
    run(["sharded_worker.py", "monitored_missing", "hccl_rs"], 3, timeout=120,
        torch_env=True).check()


def test_lightning_ddp_matches_gloo(run, tmp_path):
    pytest.importorskip("lightning")
    res = {}
    for backend in ("gloo", "hccl_rs"):
        out = tmp_path / f"lightning-{backend}.pt"
        run(["sharded_worker.py", "lightning_ddp", backend, out, "20"], 2, timeout=240,
            torch_env=True).check()
        res[backend] = torch.load(out)
    compare(res["gloo"], res["hccl_rs"])
