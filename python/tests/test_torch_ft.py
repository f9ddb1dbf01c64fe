"""The torch backend under torchft (issue 32, "Fault tolerance"):
allreduce_coalesced, the capabilities torch probes, reconfigure refused,
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
