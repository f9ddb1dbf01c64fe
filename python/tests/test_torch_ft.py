"""The torch backend under torchft (issue 32, "Fault tolerance"):
allreduce_coalesced, the capabilities torch probes, reconfigure and shrink_group,
exception types, Ctrl-C during set-up, and which thread is pinned."""

import os
import signal
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")

from conftest import HERE  # noqa: E402


@pytest.mark.parametrize("p", [2, 3])
@pytest.mark.parametrize("through", ["process_group", "dispatcher"])
def test_allreduce_coalesced(run, p, through):
    env = {"HCCL_RS_TORCH_PG": "0"} if through == "dispatcher" else {}
    run(["torch_ft_worker.py", "coalesced"], p, timeout=120, torch_env=True, env=env).check()


@pytest.mark.parametrize("through", ["process_group", "dispatcher"])
def test_capabilities_torch_probes_answer(run, through):
    env = {"HCCL_RS_TORCH_PG": "0"} if through == "dispatcher" else {}
    run(["torch_ft_worker.py", "capabilities"], 2, timeout=90, torch_env=True, env=env).check()


def test_reconfigure_native_fresh_shrink_grow(run):
    # rank 2 is killed; rank 0 starts the joiner (in its process group:
    # killed with it however the test ends)
    ranks = run(["torch_ft_worker.py", "reconfigure_native"], 3, timeout=120, torch_env=True)
    assert ranks.results[2][0] == -signal.SIGKILL, ranks.results[2]
    for r in (0, 1):
        rc, out, err = ranks.results[r]
        assert rc == 0, f"rank {r} exit {rc}:\n{err[-3000:]}"
        assert f"rank {r} reconfigured: fresh, shrink, grow, shrink" in out, out


def test_shrink_group_after_a_kill(run):
    ranks = run(["torch_ft_worker.py", "shrink_killed"], 4, timeout=120, torch_env=True)
    assert ranks.results[3][0] == -signal.SIGKILL, ranks.results[3]
    for r in range(3):
        rc, out, err = ranks.results[r]
        assert rc == 0, f"rank {r} exit {rc}:\n{err[-3000:]}"
        assert f"rank {r} shrunk: collectives on the shrunk group correct" in out, out


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
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       cwd=HERE)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stdout + p.stderr


_HANGING_SET_UP = """
import os, sys, time, hccl_rs
root = hccl_rs.get_root_info()
print("ready", flush=True)
t0 = time.monotonic()
try:
    hccl_rs.Comm(2, root, 0)  # rank 1 never comes
except KeyboardInterrupt:
    print(f"interrupted after {time.monotonic() - t0:.2f} s", flush=True)
    if sys.argv[1] == "raise":
        raise
    # the set-up thread ends by itself within HCCL_CONNECT_TIMEOUT
    def setup_threads():
        names = []
        for t in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{t}/comm") as f:
                    names.append(f.read().strip())
            except OSError:
                pass
        return names.count("hccl_rs-set-up")
    assert setup_threads() == 1, setup_threads()
    end = time.monotonic() + 15
    while setup_threads() and time.monotonic() < end:
        time.sleep(0.1)
    assert setup_threads() == 0, "the set-up thread outlived HCCL_CONNECT_TIMEOUT"
    print(f"set-up thread gone after {time.monotonic() - t0:.1f} s", flush=True)
else:
    raise AssertionError("a communicator formed without its peer")
"""


def _interrupt_set_up(mode, connect_timeout):
    env = dict(os.environ, HCCL_CONNECT_TIMEOUT=str(connect_timeout), HCCL_IF_IP="127.0.0.1")
    p = subprocess.Popen([sys.executable, "-c", _HANGING_SET_UP, mode], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True, cwd=HERE)
    try:
        assert p.stdout.readline().strip() == "ready", p.stderr.read()
        time.sleep(1.0)
        p.send_signal(signal.SIGINT)
        sent = time.monotonic()
        out, err = p.communicate(timeout=30)
        return p.returncode, time.monotonic() - sent, out, err
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def test_ctrl_c_interrupts_communicator_set_up():
    """Ctrl-C while a communicator waits for peers that never come raises
    KeyboardInterrupt at once (it used to wait for HCCL_CONNECT_TIMEOUT)."""
    rc, took, out, err = _interrupt_set_up("raise", 60)
    assert took < 2.0, f"exited {took:.1f} s after SIGINT\n{out}\n{err}"
    assert "interrupted after" in out, out + err
    assert "KeyboardInterrupt" in err, err
    assert rc != 0, rc


def test_interrupted_set_up_thread_ends_by_itself():
    rc, _took, out, err = _interrupt_set_up("catch", 3)
    assert rc == 0, out + err
    assert "interrupted after" in out and "set-up thread gone" in out, out + err


def test_affinity_pins_the_op_thread_not_the_creating_thread(run):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs")
    run(["torch_ft_worker.py", "affinity"], 2, timeout=90, torch_env=True,
        env={"HCCL_RS_CPU_AFFINITY": "auto"}).check()


# -- timeouts, abandoned ops, future threads, async errors (issue 32,
# defects 1, 2, 3, 6)

_MODES = [
    pytest.param({}, id="process_group"),
    pytest.param({"HCCL_RS_TORCH_PG": "0"}, id="dispatcher"),
]


@pytest.mark.parametrize("env", _MODES)
def test_group_timeout_bounds_ops(run, env):
    """timeout=1 s on a group whose peer is stopped: the op fails in ~1 s."""
    ranks = run(["torch_ft_worker.py", "op_timeout"], 2, timeout=90, torch_env=True, env=env)
    ranks.check()
    assert "timed out after" in ranks.out(0), ranks.out(0)


@pytest.mark.parametrize("env", _MODES)
def test_work_wait_timeout(run, env):
    run(["torch_ft_worker.py", "wait_timeout"], 2, timeout=90, torch_env=True, env=env).check()


@pytest.mark.parametrize("env", _MODES)
def test_abandoned_work_drops_at_once(run, env):
    run(["torch_ft_worker.py", "abandon"], 2, timeout=90, torch_env=True, env=env).check()


@pytest.mark.parametrize("env", _MODES)
def test_futures_of_one_group_wait_for_no_other(run, env):
    run(["torch_ft_worker.py", "futures_per_group"], 2, timeout=90, torch_env=True,
        env=env).check()


@pytest.mark.parametrize("env", _MODES)
def test_revocation_surfaces_in_get_error(run, env):
    run(["torch_ft_worker.py", "revoke"], 2, timeout=90, torch_env=True, env=env).check()


_LONELY = """
import sys, time
from datetime import timedelta
import hccl_rs
how, secs = sys.argv[1], float(sys.argv[2])
if how == "torch":
    import torch.distributed as dist
    import hccl_rs.torch  # noqa: F401
t0 = time.monotonic()
try:
    if how == "torch":
        # rank 1 never comes (an explicit store: no rendezvous to wait at)
        dist.init_process_group("hccl_rs", store=dist.HashStore(), rank=0, world_size=2,
                                timeout=timedelta(seconds=secs))
    else:
        hccl_rs.Comm(2, hccl_rs.get_root_info(), 0, connect_timeout=timedelta(seconds=secs))
except hccl_rs.HcclError as e:
    took = time.monotonic() - t0
    if how == "torch":
        assert isinstance(e, dist.DistBackendError), type(e).__mro__
    print(f"failed after {took:.2f} s: {type(e).__name__}: {e}", flush=True)
else:
    raise AssertionError("a communicator formed without its peer")
"""


@pytest.mark.parametrize("how", ["torch", "native"])
def test_set_up_gives_up_after_the_group_timeout(how):
    """A peer that never starts fails set-up after the group's timeout
    (Gloo's behaviour), not HCCL_CONNECT_TIMEOUT (120 s)."""
    env = dict(os.environ, HCCL_IF_IP="127.0.0.1")
    env.pop("HCCL_CONNECT_TIMEOUT", None)
    env.pop("HCCL_RS_CONNECT_TIMEOUT_MS", None)
    p = subprocess.Popen([sys.executable, "-c", _LONELY, how, "1.5"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True, cwd=HERE)
    try:
        out, err = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        raise AssertionError(f"set-up still waiting after 30 s\n{out}\n{err}") from None
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert p.returncode == 0, out + err
    took = float(out.split("failed after ")[1].split(" s")[0])
    assert 1.4 <= took <= 4.0, out
    assert "HcclTimeoutError" in out, out


def test_comm_timeouts_and_revoke_single_rank():
    """The native Comm's timeout arguments and setters (seconds or
    timedelta, millisecond precision, checked), and revoke()/revoked() on
    a one-rank communicator."""
    code = r"""
from datetime import timedelta
import hccl_rs
root = hccl_rs.get_root_info()
c = hccl_rs.Comm(1, root, 0, connect_timeout=5, exec_timeout=0.25)
assert c.exec_timeout == 0.25, c.exec_timeout
c.set_exec_timeout(timedelta(milliseconds=1500))
assert c.exec_timeout == 1.5, c.exec_timeout
c.set_exec_timeout(0.0004)  # rounded up to a millisecond, never to 0
assert c.exec_timeout == 0.001, c.exec_timeout
c.set_exec_timeout(None)
assert c.exec_timeout is None, c.exec_timeout
for bad in (-1, float("nan"), timedelta(seconds=-2), "1"):
    try:
        c.set_exec_timeout(bad)
    except (hccl_rs.ParameterError, TypeError) as e:
        assert isinstance(e, hccl_rs.ParameterError) or bad == "1", (bad, e)
    else:
        raise AssertionError(f"set_exec_timeout({bad!r}) was taken")
try:
    hccl_rs.Comm(1, root, 0, connect_timeout=0)
except hccl_rs.ParameterError as e:
    assert "connect_timeout" in str(e), e
else:
    raise AssertionError("connect_timeout=0 was taken")
x = bytearray(8)
c.all_reduce(x)
assert c.revoked() is None and c.async_error() is None
c.revoke("done with it")
assert c.revoked() == (0, "done with it"), c.revoked()
e = c.async_error()
assert isinstance(e, hccl_rs.SuspendedError) and "revoked by rank 0: done with it" in str(e), e
try:
    c.all_reduce(x)
except hccl_rs.SuspendedError as e:
    assert "revoked by rank 0: done with it" in str(e), e
else:
    raise AssertionError("an op on a revoked communicator ran")
c.destroy()
print("ok")
"""
    env = dict(os.environ, HCCL_IF_IP="127.0.0.1")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       cwd=HERE, env=env)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stdout + p.stderr
