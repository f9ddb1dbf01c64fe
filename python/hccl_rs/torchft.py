"""hccl_rs under torchft: a reconfigurable process group for torchft's
``Manager``, a one-line switch from torchft's own Gloo group::

    from hccl_rs.torchft import ProcessGroupHcclRs
    pg = ProcessGroupHcclRs(timeout=timedelta(seconds=10))   # was ProcessGroupGloo(...)
    manager = Manager(pg=pg, ...)

It subclasses torchft's ``ProcessGroupWrapper`` as torchft's
``ProcessGroupGloo`` does, with the same reconfigure handles (torchft's:
an id, the store this group hosts, the global rank). Where Gloo makes a
new group at every quorum, this one keeps its communicator and changes it
(:mod:`hccl_rs._reconfigure`): a replica lost, the survivors shrink
without it over their communicator's control plane; a replica back, the
members grow to take it (the restarted process joins with the grow id);
otherwise a fresh communicator through the first handle's store. Errors:
a collective whose peer died fails in milliseconds naming it, the group's
``errored()`` then returns it (the Manager skips the step and reconfigures
at the next quorum); ``timeout`` bounds the set-up and every op.

torchft is optional: ``import hccl_rs`` and ``hccl_rs.torch`` never import
it; importing this module without torchft raises ``ImportError`` saying
what to install.
"""

from __future__ import annotations

import logging
import os
from datetime import timedelta

try:
    from torchft.process_group import ProcessGroupWrapper, _rendezvous
    from torchft.work import _DummyWork
except ImportError as e:  # pragma: no cover - exercised without torchft
    raise ImportError(
        "hccl_rs.torchft needs torchft (pip install torchft-nightly; it needs torch 2.14 "
        f"or later for ReconfigureOptions): {e}"
    ) from e

import torch.distributed as dist

from .torch import HcclRsProcessGroup

__all__ = ["ProcessGroupHcclRs"]

logger = logging.getLogger(__name__)


class ProcessGroupHcclRs(ProcessGroupWrapper):
    """A torchft process group over hccl_rs (CPU tensors).

    Args:
        timeout: bound of each communicator's set-up and of every op
            (a hung or stopped peer fails the op after it).
    """

    def __init__(self, timeout: timedelta = timedelta(seconds=60)) -> None:
        super().__init__(timeout=timeout)
        # the hccl_rs group, made at the first reconfigure and kept: its
        # communicator is what later reconfigures shrink and grow
        self._hccl: HcclRsProcessGroup | None = None

    def getBackendName(self) -> str:  # noqa: N802 (torch's name)
        return "torchft-hccl_rs"

    def reconfigure(self, opts):
        """torchft's (and torch's) reconfigure: this group's rank is the
        index of its own handle in ``opts.handles``; blocks until the
        communicator is formed (shrunk, grown or fresh) and raises if it
        cannot be."""
        rendezvous = _rendezvous(opts, self._handle_id())
        self._rank = rendezvous.rank
        self._uuid = rendezvous.uuid
        self._global_ranks = rendezvous.global_ranks
        pg = self._hccl
        if pg is None:
            # (the store is the base ProcessGroup's; reconfigure meets on
            # the handles' stores, so a local one serves)
            pg = HcclRsProcessGroup(dist.HashStore(), 0, 1, self._timeout, reconfigure=True)
            # torchft's handles carry torchft's id: the plan matches on it
            pg._backend._reconfigurer.id = self._handle_id()
            self._hccl = pg
        self._pg = None
        pg._backend._timeout = self._timeout
        pg.reconfigure(opts)
        self._pg = pg
        return _DummyWork(None)

    @property
    def last_path(self) -> str | None:
        """How the last reconfigure formed the communicator: ``"fresh"``,
        ``"shrink"``, ``"grow"``, ``"shrink+grow"`` or ``"join"``."""
        pg = self._hccl
        return None if pg is None else pg._backend._reconfigurer.last_path

    def errored(self) -> Exception | None:
        """What broke the communicator in the background (a lost peer, a
        revocation, a timed-out op), or None: torchft's Manager checks it
        before committing a step."""
        pg = self._pg
        if pg is None:
            return None
        comm = pg.comm
        if comm.destroyed:
            return None
        return comm.async_error() or pg._futures.timed_out

    def abort(self, errored: bool = True) -> None:
        """Ends this group's ops: the communicator is revoked (every
        rank's ops on it end at once, and a later reconfigure can still
        shrink or grow it), then the group has no usable process group
        until the next reconfigure."""
        if errored:
            self.errors_logger.info(
                "",
                extra={
                    "job_id": os.environ.get("JOB_ID", "unknown"),
                    "replica_id": self._replica_id,
                    "rank": self._rank,
                    "uuid": self._uuid,
                    "error": "process_group_abort",
                },
            )
        pg = self._hccl
        if pg is not None and not pg.comm.destroyed:
            pg.comm.revoke("aborted by torchft")
        self._pg = None

    def shutdown(self) -> None:
        """Destroys the communicator (and its future thread)."""
        pg, self._hccl, self._pg = self._hccl, None, None
        if pg is not None:
            pg.shutdown()

    def set_timeout(self, timeout: timedelta) -> None:
        """The bound of later set-ups and of every op from now on."""
        self._timeout = timeout
        if self._hccl is not None:
            self._hccl._backend._timeout = timeout
            if not self._hccl.comm.destroyed:
                self._hccl.set_timeout(timeout)
