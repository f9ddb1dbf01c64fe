"""Test scenarios of the torch backend found by running torchft on it
(issue 32, "Fault tolerance"), run by each rank (``python
torch_ft_worker.py SCENARIO`` with torch's env:// variables; see
test_torch_ft.py)."""

import inspect
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta

import numpy as np

import torch
import torch.distributed as dist
from torch_worker import close, data, reference
from worker_common import scenario

import hccl_rs
import hccl_rs.torch  # noqa: F401  (registers "hccl_rs")


def coalesced():
    """allreduce_coalesced (its options are AllreduceCoalescedOptions, not
    a ReduceOp) against references: dist.all_reduce_coalesced (one type,
    several sizes), blocking and async, and the group's own
    allreduce_coalesced with tensors of different types and sizes."""
    dist.init_process_group("hccl_rs")
    r, p = dist.get_rank(), dist.get_world_size()
    sizes = [1, 7, 300, 33]
    for dt in (torch.float32, torch.float64):
        for name in ("SUM", "AVG", "MAX"):
            op = getattr(dist.ReduceOp, name)
            ts = [data(r + k, n, dt) for k, n in enumerate(sizes)]
            dist.all_reduce_coalesced(ts, op=op)
            for k, (t, n) in enumerate(zip(ts, sizes)):
                want = reference([data(q + k, n, dt) for q in range(p)], name, dt)
                close(t, want, f"all_reduce_coalesced {name} {dt} tensor {k}")
            ts = [data(r + k, n, dt) for k, n in enumerate(sizes)]
            fut = dist.all_reduce_coalesced(ts, op=op, async_op=True)
            fut.wait()
            for k, (t, n) in enumerate(zip(ts, sizes)):
                want = reference([data(q + k, n, dt) for q in range(p)], name, dt)
                close(t, want, f"all_reduce_coalesced async {name} {dt} tensor {k}")
    # the group's method, as torchft calls it: mixed types and sizes
    pg = dist.group.WORLD
    mixed = [(torch.float32, 5), (torch.int64, 12), (torch.bfloat16, 64), (torch.float64, 3)]
    for name in ("SUM", "MAX", "AVG"):
        kinds = [(dt, n) for dt, n in mixed if name != "AVG" or dt.is_floating_point]
        ts = [data(r * 2 + k, n, dt) for k, (dt, n) in enumerate(kinds)]
        opts = dist.AllreduceCoalescedOptions()
        opts.reduceOp = getattr(dist.ReduceOp, name)
        w = pg.allreduce_coalesced(ts, opts)
        if w is not None:
            w.wait()
        for k, (t, (dt, n)) in enumerate(zip(ts, kinds)):
            want = reference([data(q * 2 + k, n, dt) for q in range(p)], name, dt)
            close(t, want, f"pg.allreduce_coalesced {name} {dt} tensor {k}")
    # and with no options at all (sum), its result through the future
    ts = [torch.full((4,), float(r + 1)), torch.full((2,), r + 1, dtype=torch.int32)]
    got = pg.allreduce_coalesced(ts).get_future().wait()
    assert torch.equal(got[0], torch.full((4,), p * (p + 1) / 2)), got
    assert torch.equal(got[1], torch.full((2,), p * (p + 1) // 2, dtype=torch.int32)), got
    dist.barrier()
    dist.destroy_process_group()


def _probe(obj, what):
    """Every capability torch reads from a backend or group: each must
    answer (torch's C++ trampoline used to recurse on them)."""
    for name in ("supports_reconfigure", "supports_window"):
        v = getattr(obj, name)
        assert v is False, f"{what}.{name} = {v!r}"


def capabilities():
    """The attributes torch's Backend / ProcessGroup (and torchft) probe,
    on the group and on its CPU backend, for the world and a new group."""
    from torch._C._distributed_c10d import Backend

    timeout = timedelta(seconds=123)
    dist.init_process_group("hccl_rs", timeout=timeout)
    r, p = dist.get_rank(), dist.get_world_size()
    sub_timeout = timedelta(seconds=77)
    groups = [
        ("world", dist.group.WORLD, timeout),
        ("new_group", dist.new_group(list(range(p)), timeout=sub_timeout), sub_timeout),
    ]
    for what, pg, timeout in groups:
        _probe(pg, what)
        be = pg._get_backend(torch.device("cpu"))
        _probe(be, f"{what} backend")
        for name in ("_supports_time_estimate", "supports_coalescing"):
            v = getattr(be, name)
            assert v is False, f"{what} backend.{name} = {v!r}"
        assert be.supports_shrinking is True, be.supports_shrinking
        want_split = os.environ.get("HCCL_RS_TORCH_PG", "1") != "0"
        assert be.supports_splitting is want_split, be.supports_splitting
        assert be.supports_tensor_alloc(torch.device("cpu")) is False
        o = be.options
        assert isinstance(o, Backend.Options), type(o)
        assert o is be.options  # one live object, as torch's backends keep
        assert o.backend == "hccl_rs", o.backend
        assert o._timeout == timeout, o._timeout
        assert o.group_name == pg.group_name, (o.group_name, pg.group_name)
        assert list(o.global_ranks_in_group) in ([], list(range(p))), o.global_ranks_in_group
    # torch's own helpers over them
    for helper in ("_supports_reconfigure", "_supports_window"):
        if hasattr(dist.distributed_c10d, helper):
            v = getattr(dist.distributed_c10d, helper)()
            assert v is False, (helper, v)
    if hasattr(dist.distributed_c10d, "_time_estimator"):
        try:
            with dist.distributed_c10d._time_estimator():
                pass
        except NotImplementedError as e:
            assert "not supported" in str(e), e
        else:
            raise AssertionError("_time_estimator ran on a backend without it")
    # and the group still works
    t = torch.full((3,), float(r + 1))
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((3,), p * (p + 1) / 2)), t
    dist.destroy_process_group()


def _sum_of(ids, salt, n=1000):
    """The AllReduce a group of the processes ``ids`` must give."""
    return sum(torch.arange(n, dtype=torch.float32) % 5 + 3 * q + salt for q in ids)


def _mine(me, salt, n=1000):
    return torch.arange(n, dtype=torch.float32) % 5 + 3 * me + salt


def _raw_store():
    """A client of the job's TCPStore without the default group's prefix
    (the joiner of reconfigure_native has no default group)."""
    return dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                         is_master=False, wait_for_workers=False)


def _reconfigure(pg, store, phase, ids_in_order, me, uuid):
    """Every process of ``ids_in_order`` publishes its handle under
    ``phase``; each reconfigures ``pg`` with the handles in that order."""
    from torch._C._distributed_c10d import ReconfigureOptions

    store.set(f"{phase}/handle/{me}", pg.get_reconfigure_handle())
    keys = [f"{phase}/handle/{q}" for q in ids_in_order]
    store.wait(keys, timedelta(seconds=60))
    opts = ReconfigureOptions()
    opts.uuid = uuid
    opts.handles = [h.decode() for h in store.multi_get(keys)]
    opts.timeout = timedelta(seconds=30)
    w = pg.reconfigure(opts)
    assert w.wait()
    return pg._get_backend(torch.device("cpu"))._reconfigurer.last_path


def reconfigure_native():
    """torch's reconfigure contract on init_process_group("hccl_rs",
    enable_reconfigure=True), 3 processes: no communicator until
    reconfigure (ops refused saying so); formed fresh from the handles;
    rank 2 killed, the survivors reconfigure without it (a shrink); a
    fresh process (started now by rank 0) joins with the next handles
    (the members grow); every AllReduce checked against the sum."""
    dist.init_process_group("hccl_rs", enable_reconfigure=True, timeout=timedelta(seconds=30))
    me = dist.get_rank()
    pg = dist.group.WORLD
    assert pg.supports_reconfigure is True and dist.distributed_c10d._supports_reconfigure()
    assert _backend(pg).supports_reconfigure is True
    try:
        pg.allreduce([torch.ones(2)])
    except ValueError as e:
        assert isinstance(e, hccl_rs.ParameterError) and isinstance(e, dist.DistBackendError)
        assert "formed by reconfigure(), which has not run yet" in str(e), e
    else:
        raise AssertionError("an op ran before reconfigure")
    store = _raw_store()
    path = _reconfigure(pg, store, "p1", [0, 1, 2], me, 11)
    assert path == "fresh", path
    assert (pg.rank(), pg.size()) == (me, 3)
    t = _mine(me, 1)
    dist.all_reduce(t)
    assert torch.equal(t, _sum_of([0, 1, 2], 1)), t
    # the handle-exchange store must outlive rank 2: keys are set; now it dies
    if me == 2:
        store.set("p1/dead", "1")
        os.kill(os.getpid(), signal.SIGKILL)
    store.wait(["p1/dead"], timedelta(seconds=30))
    try:
        t = _mine(me, 2)
        dist.all_reduce(t)
        dist.all_reduce(t)
    except RuntimeError as e:
        assert isinstance(e, dist.DistBackendError) and isinstance(e, hccl_rs.RemoteError), type(e)
        assert "rank 2" in str(e), e
    else:
        raise AssertionError("the killed rank went unnoticed")
    path = _reconfigure(pg, store, "p2", [0, 1], me, 12)
    assert path == "shrink", path
    assert (pg.rank(), pg.size()) == (me, 2)
    t = _mine(me, 3)
    dist.all_reduce(t)
    assert torch.equal(t, _sum_of([0, 1], 3)), t
    joiner = None
    if me == 0:
        env = dict(os.environ, RANK="9")
        joiner = subprocess.Popen([sys.executable, __file__, "reconfigure_joiner"], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    path = _reconfigure(pg, store, "p3", [0, 1, 9], me, 13)
    assert path == "grow", path
    assert (pg.rank(), pg.size()) == (me, 3)
    t = _mine(me, 4)
    dist.all_reduce(t)
    assert torch.equal(t, _sum_of([0, 1, 9], 4)), t
    # the same members again under a new uuid: a new communicator without
    # root info (what torchft does after an error left the old unusable)
    path = _reconfigure(pg, store, "p4", [0, 1, 9], me, 14)
    assert path == "shrink", path
    t = _mine(me, 5)
    dist.all_reduce(t)
    assert torch.equal(t, _sum_of([0, 1, 9], 5)), t
    if joiner is not None:
        out, err = joiner.communicate(timeout=60)
        assert joiner.returncode == 0, err[-3000:]
        assert "rank 9 ok: reconfigure_joiner" in out, out
    print(f"rank {me} reconfigured: fresh, shrink, grow, shrink", flush=True)
    pg.shutdown()


def reconfigure_joiner():
    """The fresh process of reconfigure_native: an hccl_rs group in the
    reconfigure regime, made without init_process_group (as torchft's
    native test makes Gloo's), joining by the handles."""
    from hccl_rs.torch import HcclRsProcessGroup

    store = _raw_store()
    pg = HcclRsProcessGroup(dist.HashStore(), 0, 1, timedelta(seconds=30), reconfigure=True)
    path = _reconfigure(pg, store, "p3", [0, 1, 9], 9, 13)
    assert path == "join", path
    assert (pg.rank(), pg.size()) == (2, 3)
    t = _mine(9, 4)
    pg.allreduce([t]).wait()
    assert torch.equal(t, _sum_of([0, 1, 9], 4)), t
    path = _reconfigure(pg, store, "p4", [0, 1, 9], 9, 14)
    assert path == "shrink", path
    t = _mine(9, 5)
    pg.allreduce([t]).wait()
    assert torch.equal(t, _sum_of([0, 1, 9], 5)), t
    pg.shutdown()


def shrink_killed():
    """dist.shrink_group on "hccl_rs" after a kill -9: 4 ranks; rank 3 is
    killed; the survivors' op fails naming it, they agree it is lost
    (hccl_rs.torch.agree_lost), shrink the default group, and their
    collectives on the shrunk group are correct."""
    dist.init_process_group("hccl_rs", timeout=timedelta(seconds=30))
    me, p = dist.get_rank(), dist.get_world_size()
    assert _backend(dist.group.WORLD).supports_shrinking is True
    t = _mine(me, 0)
    dist.all_reduce(t)
    assert torch.equal(t, _sum_of(range(p), 0)), t
    if me == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        for salt in range(1, 50):
            t = _mine(me, salt)
            dist.all_reduce(t)
    except RuntimeError as e:
        assert isinstance(e, dist.DistBackendError) and isinstance(e, hccl_rs.RemoteError), type(e)
        assert "rank 3" in str(e), e
    else:
        raise AssertionError("the killed rank went unnoticed")
    lost = hccl_rs.torch.agree_lost()
    assert lost == [3], lost
    try:
        dist.shrink_group([me])
    except RuntimeError as e:
        assert "is in the exclusion list" in str(e), e  # torch's own check
    else:
        raise AssertionError("shrinking without this rank was accepted")
    new = dist.shrink_group(lost)
    assert dist.group.WORLD is new or dist.distributed_c10d._get_default_group() is new
    assert (dist.get_rank(), dist.get_world_size()) == (me, 3)
    t = _mine(me, 100)
    dist.all_reduce(t)
    assert torch.equal(t, _sum_of([0, 1, 2], 100)), t
    out = [torch.zeros(4) for _ in range(3)]
    dist.all_gather(out, torch.full((4,), float(me)))
    assert all(torch.equal(o, torch.full((4,), float(q))) for q, o in enumerate(out)), out
    w = dist.all_reduce(_mine(me, 101), async_op=True)
    w.wait()
    print(f"rank {me} shrunk: collectives on the shrunk group correct", flush=True)
    dist.destroy_process_group()


def _is_dist_error(e, *classes):
    """``e`` is a DistBackendError, a RuntimeError and each of ``classes``."""
    assert isinstance(e, dist.DistBackendError), type(e).__mro__
    assert isinstance(e, RuntimeError), type(e).__mro__
    assert isinstance(e, hccl_rs.HcclError), type(e).__mro__
    for c in classes:
        assert isinstance(e, c), (c, type(e).__mro__)


def error_types():
    """Errors through the torch backend are torch's DistBackendError (and
    RuntimeError), keeping their hccl_rs class: a local parameter error,
    then a peer that never joins an op (HCCL_EXEC_TIMEOUT) seen by
    Work.wait() and by the future."""
    dist.init_process_group("hccl_rs")
    r = dist.get_rank()
    try:
        dist.all_reduce(torch.ones(8)[::2])
    except dist.DistBackendError as e:
        _is_dist_error(e, hccl_rs.ParameterError, ValueError)
        assert "not contiguous" in str(e), e
    else:
        raise AssertionError("a non-contiguous tensor was taken")
    try:
        dist.all_reduce_coalesced([torch.ones(2, dtype=torch.int32)], op=dist.ReduceOp.AVG)
    except RuntimeError as e:
        _is_dist_error(e, hccl_rs.NotSupportedError, NotImplementedError)
        assert "AVG" in str(e), e
    else:
        raise AssertionError("AVG on integers was taken")
    t = torch.ones(3)
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((3,), 2.0)), t
    store = dist.distributed_c10d._get_default_store()
    if r == 1:
        # never joins rank 0's next op; leaves once rank 0 has seen it fail
        store.wait(["ft/seen"], timedelta(seconds=60))
        store.set("ft/bye", "1")  # rank 0 serves the store: it leaves last
        print(f"rank {r} ok: error_types", flush=True)
        os._exit(0)
    w = dist.all_reduce(torch.ones(5), async_op=True)
    fut = w.get_future()
    try:
        w.wait()
    except dist.DistBackendError as e:
        _is_dist_error(e, hccl_rs.HcclTimeoutError, TimeoutError)
        first = e
    else:
        raise AssertionError("an op whose peer never came completed")
    # through the dispatcher (HCCL_RS_TORCH_PG=0) the Work and its future
    # are torch's C++ wrappers of ours, which do not carry a Python
    # exception: only wait() is checked there
    if isinstance(w, hccl_rs.torch.HcclRsWork):
        assert w.exception() is first, w.exception()
        try:
            fut.wait()
        except RuntimeError as e:
            _is_dist_error(e, hccl_rs.HcclTimeoutError, TimeoutError)
            assert str(e) == str(first), (str(e), str(first))
        else:
            raise AssertionError("the future of a failed op completed")
    else:
        assert os.environ.get("HCCL_RS_TORCH_PG") == "0", type(w)
    # the torch flavour pickles (as exceptions cross processes)
    import pickle

    back = pickle.loads(pickle.dumps(first))
    assert type(back) is type(first) and back.code == first.code == 9, (type(back), back.code)
    store.set("ft/seen", "1")
    store.wait(["ft/bye"], timedelta(seconds=60))
    print(f"rank {r} ok: error_types", flush=True)
    os._exit(0)


def affinity():
    """HCCL_RS_CPU_AFFINITY=auto pins the thread that drives ops (the one
    that launches the first op), not the one that created the group (as
    torchft does on its quorum thread)."""
    import threading

    full = sorted(os.sched_getaffinity(0))
    r, p = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    assert len(full) >= p, f"the test needs {p} CPUs, has {full}"
    masks = {}
    made, checked = threading.Event(), threading.Event()

    def creator():
        dist.init_process_group("hccl_rs")
        masks["creator after init"] = os.sched_getaffinity(0)
        made.set()
        checked.wait(60)  # alive while the ops run, asked again after
        masks["creator after ops"] = os.sched_getaffinity(0)

    c = threading.Thread(target=creator, name="quorum")
    c.start()
    assert made.wait(60), "init_process_group did not finish"
    # another op thread, started before any op (threads inherit their
    # creator's mask): its ops come after the first one's, so it is not
    # the communicator's driver and keeps its mask
    other, go = {}, threading.Event()

    def later_ops():
        go.wait(60)
        dist.all_reduce(torch.ones(2))
        other["m"] = os.sched_getaffinity(0)

    th = threading.Thread(target=later_ops)
    th.start()
    masks["op thread before"] = os.sched_getaffinity(0)
    t = torch.full((4,), float(r + 1))
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((4,), p * (p + 1) / 2)), t
    masks["op thread after"] = os.sched_getaffinity(0)
    checked.set()
    c.join(60)
    want = {full[r]}  # auto: local rank i on the mask's i-th CPU
    assert masks["creator after init"] == set(full), masks
    assert masks["creator after ops"] == set(full), masks
    assert masks["op thread before"] == set(full), masks
    assert masks["op thread after"] == want, masks
    go.set()
    th.join(60)
    assert other["m"] == set(full), other
    assert os.sched_getaffinity(0) == want
    dist.destroy_process_group()


def _store():
    return dist.distributed_c10d._get_default_store()


def _backend(pg):
    """The group's c10d backend (HcclRsBackend, in either mode)."""
    return pg._get_backend(torch.device("cpu"))


def _pg_mode():
    return os.environ.get("HCCL_RS_TORCH_PG", "1") != "0"


def _stopped(pid):
    """Whether process ``pid`` is stopped (SIGSTOP)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def op_timeout():
    """A group made with timeout=1 s whose peer is stopped (SIGSTOP): rank
    0's all_reduce on it raises a timeout (DistBackendError,
    HcclTimeoutError) after about 1 s — it used to wait for
    HCCL_EXEC_TIMEOUT (1836 s) — and the backend's get_error() says TIMEOUT
    after. The world group (default timeout) goes on; dist.set_timeout
    changes a group's bound."""
    from torch._C._distributed_c10d import ErrorType

    dist.init_process_group("hccl_rs")
    r, p = dist.get_rank(), dist.get_world_size()
    store = _store()
    g = dist.new_group(list(range(p)), timeout=timedelta(seconds=1))
    t = torch.full((4,), float(r + 1))
    dist.all_reduce(t, group=g)
    assert torch.equal(t, torch.full((4,), p * (p + 1) / 2)), t
    if r == 1:
        store.set("ft/pid", str(os.getpid()))
        os.kill(os.getpid(), signal.SIGSTOP)  # rank 0 sends SIGCONT
        store.wait(["ft/timed_out"], timedelta(seconds=60))
    else:
        pid = int(store.get("ft/pid"))
        end = time.monotonic() + 20
        while not _stopped(pid):
            assert time.monotonic() < end, "rank 1 did not stop"
            time.sleep(0.01)
        t0 = time.monotonic()
        try:
            dist.all_reduce(torch.ones(5), group=g)
        except dist.DistBackendError as e:
            took = time.monotonic() - t0
            _is_dist_error(e, hccl_rs.HcclTimeoutError, TimeoutError)
            assert "HCCL_EXEC_TIMEOUT" in str(e), e
        else:
            raise AssertionError("an all_reduce whose peer is stopped completed")
        finally:
            os.kill(pid, signal.SIGCONT)
            store.set("ft/timed_out", "1")
        print(f"timed out after {took:.2f} s", flush=True)
        assert 0.9 <= took <= 4.0, f"the 1 s group timed out after {took:.2f} s"
        assert _backend(g).get_error() == ErrorType.TIMEOUT, _backend(g).get_error()
    # each communicator has its group's timeout (torch's default: 30 min)
    assert _backend(g).comm.exec_timeout == 1.0, _backend(g).comm.exec_timeout
    assert _backend(dist.group.WORLD).comm.exec_timeout == 1800.0
    dist.set_timeout(timedelta(seconds=90))  # torch's way to change it
    assert _backend(dist.group.WORLD).comm.exec_timeout == 90.0
    # another communicator of the same processes is untouched
    t = torch.full((3,), float(r + 1))
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((3,), p * (p + 1) / 2)), t
    dist.destroy_process_group()


def wait_timeout():
    """torch's Work.wait(timeout): a wait that outlasts ``timeout`` raises
    (c10d's contract: a timeout error, here DistBackendError and
    HcclTimeoutError) and leaves the op running; a later wait() completes
    it with the right data; a wait(timeout) long enough returns True. It
    used to ignore the timeout and block until the op completed."""
    dist.init_process_group("hccl_rs")
    r = dist.get_rank()
    store = _store()
    if r == 1:
        try:  # late for rank 0's op; goes anyway after 5 s (the old wait blocked)
            store.wait(["ft/go"], timedelta(seconds=5))
        except Exception:  # noqa: BLE001 (the store's timeout type varies)
            pass
        t = torch.full((3,), 2.0)
        dist.all_reduce(t)
        assert torch.equal(t, torch.full((3,), 3.0)), t
    else:
        t = torch.full((3,), 1.0)
        w = dist.all_reduce(t, async_op=True)
        t0 = time.monotonic()
        try:
            w.wait(timedelta(milliseconds=200))
        except dist.DistBackendError as e:
            took = time.monotonic() - t0
            _is_dist_error(e, hccl_rs.HcclTimeoutError, TimeoutError)
            assert "200 ms" in str(e), e
        else:
            raise AssertionError(
                f"wait(200 ms) returned after {time.monotonic() - t0:.2f} s without a timeout")
        assert 0.15 <= took < 1.5, f"wait(200 ms) took {took:.2f} s"
        assert not w.is_completed()
        store.set("ft/go", "1")
        assert w.wait() is True
        assert torch.equal(t, torch.full((3,), 3.0)), t
        assert w.is_success()
    t = torch.full((2,), float(r + 1))
    w = dist.all_reduce(t, async_op=True)
    assert w.wait(timedelta(seconds=30)) is True
    assert torch.equal(t, torch.full((2,), 3.0)), t
    dist.destroy_process_group()


def _drop_promptly(holder, what, limit=0.1):
    """Drops the one reference in ``holder`` (a list) on a helper thread;
    fails if that takes more than ``limit`` seconds (dropping an op's handle
    used to wait for the op to complete: forever here)."""
    took = {}

    def drop():
        t0 = time.monotonic()
        holder.clear()
        took["s"] = time.monotonic() - t0

    th = threading.Thread(target=drop, daemon=True)
    th.start()
    th.join(5)
    if th.is_alive():
        print(f"{what}: dropping the Work blocked for more than 5 s", file=sys.stderr, flush=True)
        os._exit(1)
    assert took["s"] < limit, f"{what}: dropping the Work took {took['s']:.3f} s"


def abandon():
    """torchft's checkpoint transport: a receive waited for with a 10 ms
    timeout, given up and dropped. Dropping its Work (torch's and the
    native one) returns at once — it used to block until the op
    completed, forever here — and the process goes on with another group;
    destroying the group holding the abandoned ops is prompt."""
    dist.init_process_group("hccl_rs")
    r, p = dist.get_rank(), dist.get_world_size()
    a = dist.new_group([0, 1])  # where rank 0 gives up on ops
    b = dist.new_group([0, 1])
    if r == 0:
        # the native API first: an all_reduce rank 1 never joins
        x = np.ones(64, np.float32)
        nw = _backend(a).comm.all_reduce_async(x)
        assert nw.wait(0.01) is False
        held = [nw]
        del nw
        _drop_promptly(held, "native all_reduce_async")
        # torch's: a receive from rank 1, which never sends
        buf = torch.zeros(1000)
        w = dist.irecv(buf, src=1, group=a)
        try:
            w.wait(timedelta(milliseconds=10))
        except dist.DistBackendError as e:
            _is_dist_error(e, hccl_rs.HcclTimeoutError)
        else:
            raise AssertionError("irecv completed without a sender")
        held = [w]
        del w
        _drop_promptly(held, "torch irecv")
        del x, buf  # the library still holds the memory the ops use
    # another group of the same processes works on
    t = torch.arange(6, dtype=torch.float64) * (r + 1)
    dist.all_reduce(t, group=b)
    assert torch.equal(t, torch.arange(6, dtype=torch.float64) * (p * (p + 1) / 2)), t
    t0 = time.monotonic()
    dist.destroy_process_group(a)  # ends the abandoned ops, then frees their memory
    took = time.monotonic() - t0
    assert took < 5.0, f"destroying the group with abandoned ops took {took:.2f} s"
    t = torch.full((3,), float(r + 1))
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((3,), p * (p + 1) / 2)), t
    dist.destroy_process_group()


def _future_threads():
    return [t for t in threading.enumerate() if t.name.startswith("hccl_rs-futures")]


def futures_per_group():
    """A hung op of one group holds back no other group's futures (one
    future thread served every group: group b's future waited for group
    a's op). Destroying the groups ends their future threads."""
    dist.init_process_group("hccl_rs")
    r, p = dist.get_rank(), dist.get_world_size()
    store = _store()
    a = dist.new_group([0, 1])
    b = dist.new_group([0, 1])
    if r == 0:
        ta = torch.full((4,), 1.0)
        fa = dist.all_reduce(ta, group=a, async_op=True).get_future()  # rank 1 comes later
        tb = torch.full((4,), 1.0)
        fb = dist.all_reduce(tb, group=b, async_op=True).get_future()
        end = time.monotonic() + 3
        while not fb.done() and time.monotonic() < end:
            time.sleep(0.01)
        done_a, done_b = fa.done(), fb.done()
        store.set("ft/join_a", "1")
        assert done_b, "group b's future waited for group a's op"
        assert not done_a, "group a's op completed without rank 1"
        fb.wait()
        assert torch.equal(tb, torch.full((4,), 3.0)), tb
        if _pg_mode():
            assert fb.value()[0] is tb
        fa.wait()
        assert torch.equal(ta, torch.full((4,), 3.0)), ta
        assert len(_future_threads()) >= 2, _future_threads()
    else:
        tb = torch.full((4,), 2.0)
        dist.all_reduce(tb, group=b)
        assert torch.equal(tb, torch.full((4,), 3.0)), tb
        store.wait(["ft/join_a"], timedelta(seconds=60))
        ta = torch.full((4,), 2.0)
        dist.all_reduce(ta, group=a)
        assert torch.equal(ta, torch.full((4,), 3.0)), ta
    dist.barrier()
    dist.destroy_process_group()
    end = time.monotonic() + 10
    while _future_threads() and time.monotonic() < end:
        time.sleep(0.01)
    assert not _future_threads(), _future_threads()


def revoke():
    """A revocation by rank 1 surfaces on rank 0: the backend's get_error()
    (torch's ErrorType; it always said SUCCESS), Comm.revoked() and
    Comm.async_error(); the next op on the group is refused; the world
    group goes on."""
    from torch._C._distributed_c10d import ErrorType

    dist.init_process_group("hccl_rs")
    r, p = dist.get_rank(), dist.get_world_size()
    g = dist.new_group([0, 1])
    be = _backend(g)
    comm = be.comm
    assert be.get_error() == ErrorType.SUCCESS, be.get_error()
    assert comm.revoked() is None and comm.async_error() is None
    t = torch.full((4,), float(r + 1))
    dist.all_reduce(t, group=g)
    assert torch.equal(t, torch.full((4,), 3.0)), t
    dist.barrier()
    why = "giving up on the group"
    if r == 1:
        comm.revoke(why)
        assert comm.revoked() == (1, why), comm.revoked()
        assert be.get_error() == ErrorType.COMM_ERROR, be.get_error()
    else:
        end = time.monotonic() + 10
        while be.get_error() == ErrorType.SUCCESS and time.monotonic() < end:
            time.sleep(0.01)
        assert be.get_error() == ErrorType.REMOTE_ERROR, be.get_error()
        assert comm.revoked() == (1, why), comm.revoked()
        e = comm.async_error()
        assert isinstance(e, hccl_rs.SuspendedError), type(e).__mro__
        assert f"revoked by rank 1: {why}" in str(e), e
    try:
        dist.all_reduce(torch.ones(2), group=g)
    except dist.DistBackendError as e:
        _is_dist_error(e, hccl_rs.SuspendedError)
        assert f"revoked by rank 1: {why}" in str(e), e
    else:
        raise AssertionError("an op on a revoked group ran")
    t = torch.full((3,), float(r + 1))
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((3,), p * (p + 1) / 2)), t
    dist.destroy_process_group()


if __name__ == "__main__":
    scenario({"coalesced": coalesced, "capabilities": capabilities,
              "reconfigure_native": reconfigure_native,
              "reconfigure_joiner": reconfigure_joiner, "shrink_killed": shrink_killed, "error_types": error_types,
              "affinity": affinity, "op_timeout": op_timeout, "wait_timeout": wait_timeout,
              "abandon": abandon, "futures_per_group": futures_per_group, "revoke": revoke})
    sys.stdout.flush()
