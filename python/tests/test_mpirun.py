"""Open MPI's mpirun launches hccl_rs ranks with nothing exported by hand:
``init_process_group("hccl_rs")`` at p = 3 and ``Comm.from_env()`` at
p = 2 find their rank, size and rendezvous from OMPI_COMM_WORLD_* / PMIx
variables (hccl_rs._launch). Also the variable filling itself, for Open
MPI, MPICH and Slurm environments, without a launcher."""

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid

import pytest

from conftest import HERE

MPIRUN = shutil.which("mpirun")
needs_mpirun = pytest.mark.skipif(MPIRUN is None, reason="mpirun (Open MPI: openmpi-bin) is not installed")

# variables the ranks must not inherit: they find everything themselves
_CLEAR = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
          "HCCL_ROOT_ADDR", "HCCL_RS_ROOT_FILE", "HCCL_RS_LAUNCHER", "TORCHELASTIC_RUN_ID",
          "GROUP_RANK", "ROLE_RANK")


def _tagged(tag):
    """Processes whose environment carries ``tag`` (the ranks mpirun
    started: its children may sit in process groups of their own)."""
    pids = []
    needle = f"HCCL_RS_TEST_TAG={tag}".encode()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    pids.append(int(d))
        except OSError:
            pass
    return [p for p in pids if p != os.getpid()]


def mpirun(np_, args, timeout):
    tag = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if k not in _CLEAR and not k.startswith("OMPI_COMM")}
    env.update(
        OMPI_ALLOW_RUN_AS_ROOT="1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
        OMPI_MCA_rmaps_base_oversubscribe="1",
        OMP_NUM_THREADS="1",
        PYTHONFAULTHANDLER="1",
        HCCL_RS_TEST_TIMEOUT=str(timeout - 10),
        HCCL_RS_TEST_TAG=tag,
    )
    cmd = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
           "-np", str(np_), sys.executable, *args]
    p = subprocess.Popen(cmd, cwd=HERE, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGTERM)  # mpirun takes its ranks down
        try:
            out, _ = p.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, _ = p.communicate()
        out += f"\n[mpirun killed after the {timeout} s timeout]"
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        for _ in range(2):
            left = _tagged(tag)
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if left:
                time.sleep(0.2)
    return p.returncode, out


@needs_mpirun
def test_init_process_group_under_mpirun():
    pytest.importorskip("torch")
    rc, out = mpirun(3, ["mpi_worker.py", "torch_backend"], timeout=150)
    assert rc == 0, out[-6000:]
    for r in range(3):
        assert f"rank {r} ok: torch_backend" in out, out[-6000:]


@needs_mpirun
def test_comm_from_env_under_mpirun():
    rc, out = mpirun(2, ["mpi_worker.py", "from_env"], timeout=90)
    assert rc == 0, out[-6000:]
    for r in range(2):
        assert f"rank {r} ok: from_env" in out, out[-6000:]


# ------------------------------------------------ the filling, no launcher


@pytest.fixture(scope="module")
def _launch():
    """The installed hccl_rs._launch (``python -m pytest`` from python/ puts
    the source tree, without the extension, first on sys.path)."""
    import importlib.util

    path = subprocess.run(
        [sys.executable, "-c", "import hccl_rs._launch as m; print(m.__file__)"],
        cwd=HERE, capture_output=True, text=True, check=True, timeout=60,
    ).stdout.strip()
    spec = importlib.util.spec_from_file_location("hccl_rs_launch_installed", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_fill_env_open_mpi(_launch):
    base = {"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4",
            "OMPI_COMM_WORLD_LOCAL_RANK": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
            "PMIX_NAMESPACE": "1908539393", "OMPI_MCA_ess_base_jobid": "1908539393"}
    env = dict(base)
    got = _launch.fill_env(env)
    port = int(got["MASTER_PORT"])
    assert got == {"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "4",
                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "HCCL_RS_LAUNCHER": "mpirun"}
    assert _launch.PORT_LO <= port < _launch.PORT_LO + 2 * _launch.PORT_SLOTS and port % 2 == 0
    # every rank of the job derives the same port; another job another one
    other = dict(base, OMPI_COMM_WORLD_RANK="0", OMPI_COMM_WORLD_LOCAL_RANK="0")
    assert _launch.fill_env(other)["MASTER_PORT"] == str(port)
    jobs = {_launch.derived_port({"PMIX_NAMESPACE": str(j)}) for j in range(200)}
    assert len(jobs) > 150
    # a second call changes nothing; set variables are kept
    assert _launch.fill_env(env) == {}
    kept = dict(base, MASTER_PORT="29500", MASTER_ADDR="node0")
    del kept["OMPI_COMM_WORLD_LOCAL_SIZE"]
    got = _launch.fill_env(kept)
    assert "MASTER_PORT" not in got and "MASTER_ADDR" not in got and "LOCAL_WORLD_SIZE" not in got
    assert kept["MASTER_ADDR"] == "node0" and kept["MASTER_PORT"] == "29500"


def test_fill_env_mpich_and_slurm(_launch):
    env = {"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2",
           "PMI_KVSNAME": "kvs_123_0"}
    got = _launch.fill_env(env)
    assert (got["RANK"], got["WORLD_SIZE"], got["LOCAL_RANK"], got["LOCAL_WORLD_SIZE"]) == ("1", "2", "1", "2")
    assert got["HCCL_RS_LAUNCHER"] == "mpich" and got["MASTER_ADDR"] == "127.0.0.1"
    env = {"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "SLURM_JOB_NUM_NODES": "2",
           "SLURM_TASKS_PER_NODE": "2(x2)", "SLURM_JOB_ID": "77", "SLURM_STEP_ID": "0"}
    with pytest.warns(RuntimeWarning, match="MASTER_ADDR is not set"):
        got = _launch.fill_env(env)
    assert (got["RANK"], got["WORLD_SIZE"], got["LOCAL_RANK"], got["LOCAL_WORLD_SIZE"]) == ("3", "4", "1", "2")
    assert "MASTER_ADDR" not in got and got["HCCL_RS_LAUNCHER"] == "srun"
    assert got["MASTER_PORT"] == str(_launch.derived_port({"SLURM_JOB_ID": "77", "SLURM_STEP_ID": "0"}))
    one = {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_NUM_NODES": "1", "SLURM_JOB_ID": "9"}
    assert _launch.fill_env(one)["MASTER_ADDR"] == "127.0.0.1"


def test_fill_env_leaves_torchrun_alone(_launch):
    env = {"TORCHELASTIC_RUN_ID": "x", "RANK": "0", "WORLD_SIZE": "2",
           "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}
    assert _launch.fill_env(env) == {}
    assert _launch.fill_env({"RANK": "1", "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}) == {}
    assert _launch.fill_env({}) == {}
