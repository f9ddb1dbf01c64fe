"""Test scenarios of the torch backend found by running torchft on it
(issue 32, "Fault tolerance"), run by each rank (``python
torch_ft_worker.py SCENARIO`` with torch's env:// variables; see
test_torch_ft.py)."""

import inspect
import os
import sys
from datetime import timedelta

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
        for name in ("supports_shrinking", "_supports_time_estimate", "supports_coalescing"):
            v = getattr(be, name)
            assert v is False, f"{what} backend.{name} = {v!r}"
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


def reconfigure_refused():
    """init_process_group(enable_reconfigure=True) is refused with a clear
    error (it used to be ignored: a group that was never going to be
    reconfigured)."""
    if "enable_reconfigure" not in inspect.signature(dist.init_process_group).parameters:
        print("skip: this torch has no enable_reconfigure", flush=True)
        return
    try:
        dist.init_process_group("hccl_rs", enable_reconfigure=True)
    except NotImplementedError as e:
        assert isinstance(e, hccl_rs.NotSupportedError), type(e).__mro__
        assert isinstance(e, RuntimeError), type(e).__mro__
        assert "reconfigure" in str(e) and "not supported yet by hccl_rs" in str(e), e
    else:
        raise AssertionError("enable_reconfigure=True was accepted")


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


if __name__ == "__main__":
    scenario({"coalesced": coalesced, "capabilities": capabilities,
              "reconfigure_refused": reconfigure_refused, "error_types": error_types,
              "affinity": affinity})
    sys.stdout.flush()
