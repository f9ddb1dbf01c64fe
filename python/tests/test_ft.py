"""Shrink and grow through the NumPy API (``Comm.shrink``, ``agree_lost``,
``grow_id``, ``grow``, ``Comm.join_grown``) with real processes, each run
under the harness's timeout (every rank, and the joiner rank 0 starts,
killed however the test ends)."""

import signal

from conftest import launch


def test_kill_9_survivors_shrink_by_agreement_then_grow_back():
    ranks = launch(["ft_worker.py", "kill_shrink_grow"], 4, timeout=120)
    rc3 = ranks.results[3][0]
    assert rc3 == -signal.SIGKILL, ranks.results[3]
    for r in range(3):
        rc, out, err = ranks.results[r]
        assert rc == 0, f"rank {r} exit {rc}:\n{err[-3000:]}"
        assert "failed naming the lost rank" in out, out
        assert f"rank {r} shrunk: first correct op" in out, out
        assert f"rank {r} grown: all_reduce over 4 correct" in out, out
        assert f"rank {r} ok: kill_shrink_grow" in out, out
    assert "joiner ok: first correct op" in ranks.out(0), ranks.out(0)


def test_shrink_with_a_list_and_its_errors():
    launch(["ft_worker.py", "told_shrink"], 3, timeout=90).check()


def test_recover_after_a_mismatch_and_a_timeout():
    """Comm.recover: the same object runs on after a failed op (a count
    mismatch, then a hung rank), every result checked."""
    ranks = launch(["ft_worker.py", "recover"], 3, timeout=90)
    ranks.check()
    for r in range(3):
        assert f"rank {r} ok: recover" in ranks.out(r), ranks.out(r)


def test_malformed_ids_and_timeouts_are_refused():
    launch(["ft_worker.py", "bad_ids"], 1, timeout=60).check()


def test_torchft_is_optional():
    """hccl_rs and hccl_rs.torch import without torchft; hccl_rs.torchft
    then raises ImportError naming the package to install."""
    import subprocess
    import sys

    import pytest

    pytest.importorskip("torch")
    code = (
        "import sys; sys.modules['torchft'] = None\n"
        "import hccl_rs, hccl_rs.torch\n"
        "try:\n"
        "    import hccl_rs.torchft\n"
        "except ImportError as e:\n"
        "    assert 'torchft-nightly' in str(e), e\n"
        "    print('refused:', e)\n"
        "else:\n"
        "    raise AssertionError('hccl_rs.torchft imported without torchft')\n"
    )
    from conftest import HERE

    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       cwd=HERE)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "refused:" in p.stdout, p.stdout
