"""Helpers of the hccl_rs tests: launching ranks as processes.

Every multi-process test runs its ranks with :func:`launch`, which puts
them in their own process group, bounds the run with a timeout, and kills
every child (the whole group) however the test ends. Workers also arm
``faulthandler`` so that a hang prints each rank's stack before the kill.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def free_port() -> int:
    """A TCP port free now, with the one above it (MASTER_PORT + 1).

    Taken below the kernel's ephemeral range, so the outgoing connections
    of this or another test cannot grab either port between this check
    and the bind (they did: "Address already in use" on MASTER_PORT + 1);
    checked on every address, as the rendezvous server binds.
    """
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    top = max(low - 2, 10002)
    for _ in range(200):
        port = random.randrange(10000, top, 2)
        try:
            with socket.socket() as s, socket.socket() as s2:
                s.bind(("0.0.0.0", port))
                s2.bind(("0.0.0.0", port + 1))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port pair")


class Ranks:
    """The outcome of a launch: return codes and outputs per rank."""

    def __init__(self, results):
        self.results = results  # [(rc, stdout, stderr)]

    def check(self):
        bad = [(i, rc, err[-3000:]) for i, (rc, _out, err) in enumerate(self.results) if rc != 0]
        assert not bad, "ranks failed:\n" + "\n".join(
            f"--- rank {i} exit {rc}\n{err}" for i, rc, err in bad
        )
        for i, (_rc, out, _err) in enumerate(self.results):
            assert f"rank {i} ok:" in out, f"rank {i} did not finish its scenario:\n{out}"
        return self

    def out(self, rank: int) -> str:
        return self.results[rank][1]


def _kill(procs):
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def launch(args, p: int, timeout: float = 90, env=None, torch_env=False) -> Ranks:
    """Runs ``python <args>`` as ``p`` ranks (RANK / WORLD_SIZE set; they
    meet through a root file, or torch's env:// with ``torch_env``), waits
    at most ``timeout`` seconds in all, and kills every rank on the way out."""
    tmp = tempfile.mkdtemp(prefix="hccl_rs_test_")
    base = dict(os.environ)
    base.update(
        WORLD_SIZE=str(p),
        HCCL_RS_ROOT_FILE=os.path.join(tmp, "root"),
        PYTHONFAULTHANDLER="1",
        HCCL_RS_TEST_TIMEOUT=str(timeout),
        OMP_NUM_THREADS="1",
    )
    if torch_env:
        base.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    base.update(env or {})
    procs = []
    outs = []
    try:
        for r in range(p):
            e = dict(base, RANK=str(r), LOCAL_RANK=str(r))
            procs.append(
                subprocess.Popen(
                    [sys.executable, *map(str, args)],
                    env=e,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    start_new_session=True,
                    cwd=HERE,
                )
            )
        end = time.monotonic() + timeout
        for pr in procs:
            left = max(0.1, end - time.monotonic())
            try:
                out, err = pr.communicate(timeout=left)
            except subprocess.TimeoutExpired:
                _kill(procs)
                out, err = pr.communicate()
                err += f"\n[killed after the {timeout} s timeout]"
            outs.append((pr.returncode, out, err))
    finally:
        _kill(procs)
    return Ranks(outs)


@pytest.fixture
def run():
    return launch
