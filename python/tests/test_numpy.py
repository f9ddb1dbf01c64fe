"""The NumPy-buffer API across processes: every primitive against
references at p = 2, 3, 4, buffers of every kind, async handles,
sub-communicators, and failures (bad input, ranks that disagree, a killed
peer, Ctrl-C)."""

import pytest

P = [2, 3, 4]


@pytest.mark.parametrize("p", P)
def test_every_primitive_numpy(run, p):
    run(["np_worker.py", "primitives"], p, timeout=240).check()


@pytest.mark.parametrize("p", P)
def test_every_primitive_on_torch_tensors_through_comm(run, p):
    pytest.importorskip("torch")
    run(["np_worker.py", "primitives", "torch"], p, timeout=240).check()


@pytest.mark.parametrize("p", P)
def test_in_place_all_gather_and_reduce_scatter(run, p):
    run(["np_worker.py", "in_place"], p, timeout=120).check()


def test_bytearray_memoryview_slices_and_large_arrays(run):
    run(["np_worker.py", "views"], 2).check()


def test_bfloat16_and_bool_tensors(run):
    pytest.importorskip("torch")
    run(["np_worker.py", "torch_tensors"], 3).check()


@pytest.mark.parametrize("p", [2, 3])
def test_async_handles(run, p):
    run(["np_worker.py", "asyncs"], p).check()


def test_bad_input_is_refused_before_anything_is_enqueued(run):
    run(["np_worker.py", "bad_input"], 2).check()


def test_mismatched_counts_raise_on_every_rank(run):
    ranks = run(["np_worker.py", "mismatch"], 2).check()
    for r in range(2):
        assert "inconsistent between ranks" in ranks.out(r)


@pytest.mark.parametrize("p", [2, 3])
def test_a_killed_peer_is_named_not_hung(run, p):
    ranks = run(["np_worker.py", "killed_peer"], p, timeout=60)
    assert ranks.results[p - 1][0] == 7, ranks.results[p - 1]
    for r in range(p - 1):
        rc, out, err = ranks.results[r]
        assert rc == 0, err
        assert f"rank {p - 1}" in out and "noticed after" in out, out


def test_ctrl_c_interrupts_a_wait(run):
    ranks = run(["np_worker.py", "interrupt"], 2, timeout=60).check()
    assert "interrupted after" in ranks.out(0)
    assert "after the abort" in ranks.out(0)


@pytest.mark.parametrize("p", [3, 4])
def test_split(run, p):
    run(["np_worker.py", "split"], p).check()
