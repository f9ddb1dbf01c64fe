"""torch.distributed's ``env://`` variables from an MPI or Slurm launcher.

torch's ``init_process_group`` reads ``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR`` and ``MASTER_PORT``; ``mpirun`` (Open MPI), MPICH's Hydra
and Slurm's ``srun`` set their own variables instead. :func:`fill_env`
fills the torch ones that are absent from the launcher's, so that::

    mpirun -np 4 python train.py   # train.py: init_process_group("hccl_rs")

works with nothing exported by hand on one host. The rendezvous:

* ``MASTER_ADDR``: ``127.0.0.1`` when every rank is on this host (the
  launcher's local size equals its size); across hosts it must be given
  (``mpirun -x MASTER_ADDR=node0 ...``; with Slurm, e.g. the first host of
  ``scontrol show hostnames``), and a warning says so if it is not.
* ``MASTER_PORT``: derived from the job's id (Open MPI's PMIx namespace /
  ess jobid, Slurm's job and step id, Hydra's KVS name; else the parent
  process, which every rank shares on one host), so every rank computes
  the same even port in 20000-31998 without talking. ``Comm.from_env()``
  meets at ``MASTER_PORT + 1`` beside it. Export ``MASTER_PORT`` to choose.

Variables already set are never changed; torchrun's environment (``RANK``
present) is left alone.
"""

from __future__ import annotations

import os
import warnings
import zlib
from typing import MutableMapping

__all__ = ["fill_env", "detect", "PORT_LO", "PORT_SLOTS"]

#: The derived ``MASTER_PORT`` is ``PORT_LO + 2 * (hash % PORT_SLOTS)``:
#: even ports below Linux's ephemeral range (32768-60999), each with the
#: port above it free for ``Comm.from_env()``.
PORT_LO = 20000
PORT_SLOTS = 6000

# (launcher, rank, size, local rank, local size)
_STYLES = (
    ("mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
     "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("mpich", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
    ("srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", None),
)

# what names one job alike on every rank (first found)
_JOB_IDS = (
    "PMIX_NAMESPACE",
    "OMPI_MCA_ess_base_jobid",
    "SLURM_JOB_ID",
    "PMI_KVSNAME",
    "HCCL_RS_JOB_ID",
)

#: Set by :func:`fill_env` to the launcher it read: ``Comm.from_env()``
#: then meets at ``MASTER_PORT + 1``, beside torch's store, as under
#: torchrun (``MASTER_PORT`` is the store's).
MARK = "HCCL_RS_LAUNCHER"


def _int(env, name):
    v = env.get(name)
    if v is None:
        return None
    try:
        return int(v.strip())
    except ValueError:
        return None


def detect(env: MutableMapping[str, str] | None = None):
    """``(launcher, rank, size, local_rank, local_size)`` from an MPI or
    Slurm environment, or None; local values None where unknown."""
    env = os.environ if env is None else env
    for name, rv, sv, lrv, lsv in _STYLES:
        rank, size = _int(env, rv), _int(env, sv)
        if rank is None or size is None:
            continue
        local_rank = _int(env, lrv)
        local_size = _int(env, lsv) if lsv else None
        if name == "srun" and local_size is None:
            nodes = _int(env, "SLURM_JOB_NUM_NODES") or _int(env, "SLURM_NNODES")
            if nodes == 1:
                local_size = size
            else:  # "4" or "4(x2)": the same count on every node
                per = env.get("SLURM_TASKS_PER_NODE", "")
                head = per.split("(")[0]
                if head.isdigit() and ("," not in per):
                    local_size = int(head)
        return name, rank, size, local_rank, local_size
    return None


def _job_key(env) -> str:
    for k in _JOB_IDS:
        v = env.get(k)
        if v:
            if k == "SLURM_JOB_ID":
                v += "." + env.get("SLURM_STEP_ID", "")
            return f"{k}={v}"
    # on one host every rank of one launch has the same parent (the
    # launcher's daemon or proxy)
    return f"ppid={os.getppid()}"


def derived_port(env: MutableMapping[str, str] | None = None) -> int:
    """The ``MASTER_PORT`` every rank of this job derives alike."""
    env = os.environ if env is None else env
    h = zlib.crc32(_job_key(env).encode())
    return PORT_LO + 2 * (h % PORT_SLOTS)


def fill_env(env: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Fills ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
    ``MASTER_ADDR`` and ``MASTER_PORT`` that are absent from an MPI or
    Slurm launcher's variables (see the module's doc); returns what it
    set. Does nothing outside such a launcher or under torchrun."""
    env = os.environ if env is None else env
    if env.get("TORCHELASTIC_RUN_ID") is not None:
        return {}
    found = detect(env)
    if found is None:
        return {}
    launcher, rank, size, local_rank, local_size = found
    if "RANK" in env and _int(env, "RANK") != rank:
        return {}  # someone else's RANK: not ours to mix with
    want = {"RANK": rank, "WORLD_SIZE": size, "LOCAL_RANK": local_rank,
            "LOCAL_WORLD_SIZE": local_size}
    setv: dict[str, str] = {}
    for k, v in want.items():
        if v is not None and k not in env:
            setv[k] = str(v)
    if "MASTER_ADDR" not in env:
        if local_size is not None and local_size == size:
            setv["MASTER_ADDR"] = "127.0.0.1"
        else:
            warnings.warn(
                f"hccl_rs: {launcher} runs ranks on more than one host (or says not how many "
                "are local) and MASTER_ADDR is not set: export it on every rank, e.g. "
                "`mpirun -x MASTER_ADDR=<rank 0's host>` (srun: the first host of the job)",
                RuntimeWarning,
                stacklevel=2,
            )
    if "MASTER_PORT" not in env:
        setv["MASTER_PORT"] = str(derived_port(env))
    if MARK not in env:
        setv[MARK] = launcher
    env.update(setv)
    return setv
