"""Forming a group's communicator from torch's reconfigure handles
(``ProcessGroup.get_reconfigure_handle`` / ``reconfigure(ReconfigureOptions)``,
torch 2.14 and later; torchft's Manager drives them once per quorum).

A handle is JSON ``{"id": ..., "store": "host:port"}``: a random id per
group object (a restarted process has a new one) and the address of a
TCPStore the group hosts — the keys torchft's own handles have, so the
torchft process group's handles (which add ``global_rank``) are read the
same way. Every reconfigure meets on the first handle's store under the
call's ``uuid``; each rank writes what communicator it holds (the handle
ids of its members, by rank, and the uuid it was formed under), reads
every rank's, and all derive the same plan:

* the new members are the old ones, in their order, minus some, then new
  processes: the old members **shrink** without the missing ones (over the
  old communicator's control plane, no root info; with none missing and no
  newcomer too, which replaces a communicator an error left unusable) and
  **grow** to take the newcomers (the first member makes the grow id and
  puts it in the store, the newcomers ``Comm.join_grown`` with it);
* anything else (no old communicator, members reordered, ranks that hold
  different communicators): a **fresh** communicator, the new rank 0
  putting root info in the store.

The old communicator is revoked first (its in-flight ops end on every
rank at once; shrink and grow work on a revoked communicator) and
destroyed once the new one is formed.
"""

from __future__ import annotations

import json
import socket
import uuid as _uuid
from datetime import timedelta

from . import _native
from .errors import ParameterError

_DEFAULT_TIMEOUT = timedelta(seconds=60)


def _host() -> str:
    # (torchft's handles name the host the same way)
    return socket.gethostname()


def _store_client(addr: str, prefix: str, timeout: timedelta):
    import torch.distributed as dist

    host, _, port = addr.rpartition(":")
    store = dist.TCPStore(
        host.strip("[]"), int(port), is_master=False, wait_for_workers=False, timeout=timeout
    )
    return dist.PrefixStore(prefix, store)


def parse_handles(handles) -> list[dict]:
    """The peers of ``ReconfigureOptions.handles``: in list order (ranks by
    position), or for a set sorted by id (the same order on every rank)."""
    try:
        peers = [json.loads(h) for h in handles]
        ids = [p["id"] for p in peers]
        [p["store"] for p in peers]
    except (TypeError, ValueError, KeyError) as e:
        raise ParameterError(
            f"reconfigure: the handles are not hccl_rs (or torchft) reconfigure handles: {e}",
            1,
        ) from None
    if not peers:
        raise ParameterError("reconfigure: no handles (a communicator needs one rank)", 1)
    if len(set(ids)) != len(ids):
        raise ParameterError("reconfigure: a handle is listed twice", 1)
    if not isinstance(handles, (list, tuple)):
        peers.sort(key=lambda p: p["id"])
    return peers


def plan(ids: list[str], states: list[dict]) -> tuple:
    """What every rank does, from the new members' ``ids`` (by new rank)
    and each new rank's state (``{"members": [...], "uuid": u}`` or
    ``{}``): ``("fast", exclude, kept)`` — the old members shrink without
    the old ranks ``exclude`` and the first ``kept`` new ranks are old
    members, the rest join by a grow — or ``("fresh",)``. Pure: every rank
    computes the same from the same store contents."""
    holders = [s for s in states if s.get("members")]
    if not holders:
        return ("fresh",)
    first = holders[0]
    old = first["members"]
    kept = [i for i in ids if i in old]
    k = len(kept)
    if (
        k == 0
        or ids[:k] != kept
        or kept != [m for m in old if m in kept]
        or any(states[i] != first for i in range(k))
        or any(s.get("members") for s in states[k:])
    ):
        return ("fresh",)
    exclude = [r for r, m in enumerate(old) if m not in kept]
    return ("fast", exclude, k)


class Reconfigurer:
    """One group's side of torch's reconfigure contract (see the module
    docs); ``id`` is its handle id."""

    def __init__(self, id: str | None = None) -> None:
        self.id = id or _uuid.uuid4().hex
        self._store = None  # the TCPStore this group hosts (made lazily)
        self.members: list[str] | None = None  # handle ids of comm's ranks
        self.uuid: int | None = None
        #: how the last reconfigure formed the communicator ("fresh",
        #: "shrink", "grow", "shrink+grow", "join"): for tests and logs
        self.last_path: str | None = None

    def store_addr(self) -> str:
        """The address of the TCPStore this group hosts for its peers."""
        if self._store is None:
            import torch.distributed as dist

            self._store = dist.TCPStore(_host(), 0, is_master=True, wait_for_workers=False)
        return f"{_host()}:{self._store.port}"

    def handle(self) -> str:
        """torch's ``get_reconfigure_handle``."""
        return json.dumps({"id": self.id, "store": self.store_addr()})

    def run(self, comm, opts, comm_timeouts: dict, default_timeout: timedelta):
        """Forms the communicator ``opts`` (a ``ReconfigureOptions``)
        describes, from ``comm`` (this group's current communicator, or
        None); returns the new one (``comm`` is revoked and destroyed).
        ``comm_timeouts`` are the new communicator's ``connect_timeout`` /
        ``exec_timeout``."""
        peers = parse_handles(opts.handles)
        ids = [p["id"] for p in peers]
        if self.id not in ids:
            raise ParameterError(
                "reconfigure: this group's own handle is not among the handles "
                "(pass get_reconfigure_handle() of every member)",
                1,
            )
        rank, n = ids.index(self.id), len(ids)
        timeout = getattr(opts, "timeout", None) or default_timeout
        store = _store_client(peers[0]["store"], f"hccl_rs/reconfigure/{opts.uuid}/", timeout)
        live = comm is not None and not comm.destroyed and self.members is not None
        mine = {"members": self.members, "uuid": self.uuid} if live else {}
        store.set(f"state/{rank}", json.dumps(mine))
        keys = [f"state/{q}" for q in range(n)]
        store.wait(keys, timeout)
        states = [json.loads(v) for v in store.multi_get(keys)]
        what = plan(ids, states)
        if live:
            # ends its in-flight ops on every rank now; shrink and grow
            # work on a revoked communicator
            comm.revoke(f"reconfigured (uuid {opts.uuid})")
        new = None
        try:
            if what[0] == "fast":
                _, exclude, k = what
                if rank < k:
                    new = self._member(comm, store, exclude, k, n, rank)
                else:
                    gid = bytes(store.get("grow_id"))
                    new = _native.Comm.join_grown(n, gid, rank, **comm_timeouts)
                    self.last_path = "join"
            else:
                if rank == 0:
                    store.set("root", _native.get_root_info())
                root = bytes(store.get("root"))
                new = _native.Comm(n, root, rank, **comm_timeouts)
                self.last_path = "fresh"
        except BaseException:
            # this group holds no usable communicator now: the next
            # reconfigure forms a fresh one
            self.members = self.uuid = None
            raise
        finally:
            if comm is not None and comm is not new:
                comm.destroy()
        if "exec_timeout" in comm_timeouts:
            # (a shrunk or grown communicator has its parent's bound from
            # its creation, not one set since)
            new.set_exec_timeout(comm_timeouts["exec_timeout"])
        self.members, self.uuid = ids, opts.uuid
        return new

    def _member(self, comm, store, exclude, k, n, rank):
        """An old member's part of a fast plan: shrink, then grow."""
        cur, path = comm, []
        if exclude or k == n:
            cur = comm.shrink(exclude)
            path.append("shrink")
        if k < n:
            try:
                if rank == 0:
                    gid = cur.grow_id()
                    store.set("grow_id", gid)
                    grown = cur.grow(n, gid)
                else:
                    grown = cur.grow(n)
            finally:
                if cur is not comm:
                    cur.destroy()
            cur = grown
            path.append("grow")
        self.last_path = "+".join(path)
        return cur
