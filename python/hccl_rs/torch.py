"""The ``"hccl_rs"`` torch.distributed backend (CPU tensors).

``import hccl_rs.torch`` registers it; then, under torchrun or mpirun::

    import torch.distributed as dist
    import hccl_rs.torch  # noqa: F401
    dist.init_process_group("hccl_rs")
    dist.all_reduce(t)

Every process group (the default one and each ``new_group``) is its own
hccl-rs communicator, its ranks meeting through the group's torch store
(rank 0 puts its root info there). Collectives: all_reduce, all_gather /
all_gather_into_tensor, reduce_scatter / reduce_scatter_tensor, broadcast,
reduce, all_to_all / all_to_all_single, gather, scatter, barrier, send /
recv / batch_isend_irecv; ``async_op=True`` returns Work objects whose
futures complete in the background. Types: float32/64, float16, bfloat16,
int8–int64, uint8, bool; operators SUM, PRODUCT, MIN, MAX, AVG (floating
types). Failures raise the :mod:`hccl_rs.errors` classes mixed with
``torch.distributed.DistBackendError`` (so also ``RuntimeError``), from
the calls, ``Work.wait()`` and futures alike.

Importing it also registers CPU kernels of PyTorch's fused ops
``torch.ops.symm_mem.fused_matmul_reduce_scatter`` and
``fused_all_gather_matmul`` that run on the groups' hccl_rs communicators
(:mod:`hccl_rs._torch_fused`).
"""

from __future__ import annotations

import atexit
import os
import queue
import threading
import time
import weakref
from datetime import timedelta

# Transparent huge pages for torch's large CPU allocations make the
# cross-memory attach of big tensors cheaper; torch reads this when it
# starts, so it only helps when hccl_rs.torch is imported first.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

from . import _launch  # noqa: E402

# Under mpirun / srun: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
# MASTER_ADDR (one host) and MASTER_PORT (from the job id) for env://,
# where absent (see hccl_rs._launch).
_launch.fill_env()

import torch  # noqa: E402
import torch.distributed as dist
from torch._C._distributed_c10d import Backend as _C10dBackend
from torch._C._distributed_c10d import AllreduceOptions as _AllreduceOptions
from torch._C._distributed_c10d import ProcessGroup as _ProcessGroup
from torch._C._distributed_c10d import ErrorType as _ErrorType
from torch._C._distributed_c10d import Work as _C10dWork
from torch.distributed import ReduceOp

import functools  # noqa: E402

from . import _native
from . import _reconfigure
from . import errors as _errors
from .errors import HcclError, NotSupportedError, ParameterError

__all__ = [
    "HcclRsBackend",
    "HcclRsProcessGroup",
    "HcclRsWork",
    "BACKEND_NAME",
    "agree_lost",
    "register",
]

#: The name ``init_process_group`` takes.
BACKEND_NAME = "hccl_rs"

_ROOT_KEY = "hccl_rs/root_info"

_OPS = {
    int(ReduceOp.RedOpType.SUM): "sum",
    int(ReduceOp.RedOpType.PRODUCT): "prod",
    int(ReduceOp.RedOpType.MIN): "min",
    int(ReduceOp.RedOpType.MAX): "max",
}
_AVG = int(ReduceOp.RedOpType.AVG)
_CODE_TIMEOUT, _CODE_REMOTE = 9, 21  # HCCL_E_TIMEOUT, HCCL_E_REMOTE

_NAMES = {
    torch.float32: "float32",
    torch.float64: "float64",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.int8: "int8",
    torch.int16: "int16",
    torch.int32: "int32",
    torch.int64: "int64",
    torch.uint8: "uint8",
    torch.bool: "bool",
}
for _n in ("uint16", "uint32", "uint64"):
    if hasattr(torch, _n):
        _NAMES[getattr(torch, _n)] = _n

_RawBuffer = _native.RawBuffer
_FakeWork = torch._C._distributed_c10d.FakeWork
_SUM = ReduceOp.SUM
_CUSTOM = _ProcessGroup.BackendType.CUSTOM
# torch >= 2.7 says in the options whether the caller waits (and takes None
# from a blocking call as "already complete"); before, every call is async
_HAS_ASYNC_OP = hasattr(_AllreduceOptions(), "asyncOp")


# -- errors: what the backend raises is also torch's DistBackendError (as
# Gloo's and NCCL's failures are), so code that catches that (torchft,
# torchelastic) sees hccl_rs failures; each keeps its hccl_rs class
# (a timeout is still an HcclTimeoutError and a TimeoutError)
_DistBackendError = getattr(dist, "DistBackendError", RuntimeError)
_DIST_CLASSES: dict = {}


def _rebuild_dist_error(cls, args):
    # unpickling (multiprocessing): the class is made again here
    return _dist_class(cls)(*args)


def _dist_reduce(self):
    base = next(c for c in type(self).__mro__ if c.__module__ == _errors.__name__)
    return (_rebuild_dist_error, (base, (str(self), self.code, self.message, self.rank,
                                         self.peer, self.tag)))


def _dist_class(cls: type) -> type:
    """``cls`` (an :class:`HcclError` class) mixed with torch's
    ``DistBackendError``, made at its first use."""
    if issubclass(cls, _DistBackendError):
        return cls
    c = _DIST_CLASSES.get(cls)
    if c is None:
        c = type(cls.__name__, (cls, _DistBackendError), {
            "__module__": __name__,
            "__doc__": f"{cls.__doc__ or ''}\n\nRaised by the torch backend: also a "
                       "``torch.distributed.DistBackendError``.",
            "__reduce__": _dist_reduce,
        })
        _DIST_CLASSES[cls] = c
    return c


def _dist_error(e: BaseException) -> BaseException:
    """``e`` as the torch backend raises it: an :class:`HcclError` becomes
    the same error of its class mixed with ``DistBackendError``; anything
    else (KeyboardInterrupt, torch's own errors) is left as it is."""
    if not isinstance(e, HcclError) or isinstance(e, _DistBackendError):
        return e
    d = _dist_class(type(e))(str(e), e.code, e.message, e.rank, e.peer, e.tag)
    d.__cause__, d.__context__ = e.__cause__, e.__context__
    d.__suppress_context__ = e.__suppress_context__
    return d.with_traceback(e.__traceback__)


def _dist_errors(f):
    """``f`` raising :func:`_dist_error`'s form of its hccl_rs errors (a
    method of a backend also notes a timed-out op: see ``get_error``)."""

    @functools.wraps(f)
    def call(*args, **kwargs):
        try:
            return f(*args, **kwargs)
        except HcclError as e:
            futures = getattr(args[0], "_futures", None) if args else None
            if futures is not None:
                futures.note(e)
            raise _dist_error(e) from e.__cause__

    return call


_DEFAULT_PG_TIMEOUT = getattr(
    getattr(dist, "constants", None), "default_pg_timeout", timedelta(minutes=30)
)


def _comm_timeouts(timeout: timedelta) -> dict:
    """A group's communicator timeouts from torch's ``timeout``, which
    Gloo takes for both: its set-up (a peer that never comes) and every op
    (a collective not done within it raises). Where the group has torch's
    default timeout (none was given) and the environment sets hccl's own
    (``HCCL_CONNECT_TIMEOUT`` / ``HCCL_RS_CONNECT_TIMEOUT_MS``,
    ``HCCL_EXEC_TIMEOUT`` / ``HCCL_RS_EXEC_TIMEOUT_MS``), that one stays."""
    default = timeout is None or timeout == _DEFAULT_PG_TIMEOUT
    env = os.environ
    out = {}
    if not (default and ("HCCL_CONNECT_TIMEOUT" in env or "HCCL_RS_CONNECT_TIMEOUT_MS" in env)):
        out["connect_timeout"] = timeout
    if not (default and ("HCCL_EXEC_TIMEOUT" in env or "HCCL_RS_EXEC_TIMEOUT_MS" in env)):
        out["exec_timeout"] = timeout
    return out


def _raw(t: torch.Tensor, what: str) -> _native.RawBuffer:
    """``t`` as memory the library takes (checked: CPU, contiguous, known type)."""
    name = _NAMES.get(t.dtype)
    if name is None:
        raise ParameterError(f"{what}: unsupported element type {t.dtype}", 1)
    if not t.is_cpu:
        raise ParameterError(f"{what} is on {t.device}; the hccl_rs backend takes CPU tensors", 1)
    if not t.is_contiguous():
        raise ParameterError(f"{what} is not contiguous", 1)
    return _RawBuffer(t.data_ptr(), t.nbytes, name, t)


# Wrappers of tensors' memory for blocking calls, by (address, bytes, type):
# without an owner (the caller holds the tensor for the whole call), so
# the cache keeps no tensor alive.
_HELD: dict = {}
_HELD_MAX = 64


def _raw_held(t: torch.Tensor) -> _native.RawBuffer:
    """:func:`_raw` for a blocking call, cached."""
    if t.is_contiguous():
        key = (t.data_ptr(), t.nbytes, t.dtype)
        b = _HELD.get(key)
        if b is not None and t.is_cpu:
            return b
        b = _raw(t, "tensor")
        if len(_HELD) >= _HELD_MAX:
            _HELD.clear()
        b = _HELD[key] = _RawBuffer(b.address, b.nbytes, b.dtype, None)
        return b
    return _raw(t, "tensor")  # raises


def _allreduce_args(tensors, opts):
    """The other forms of ``ProcessGroup.allreduce``: a tensor for the
    list; for the options a ``ReduceOp`` (or nothing), or options of
    another type that carry the same fields (``AllreduceCoalescedOptions``,
    which torch binds as a class of its own, not an ``AllreduceOptions``)."""
    if isinstance(tensors, torch.Tensor):
        tensors = [tensors]
    else:
        tensors = list(tensors)
    if opts is None or not isinstance(opts, _AllreduceOptions):
        o = _AllreduceOptions()
        if hasattr(opts, "reduceOp"):
            o.reduceOp = opts.reduceOp
            o.timeout = opts.timeout
            if _HAS_ASYNC_OP:
                o.asyncOp = getattr(opts, "asyncOp", True)
        elif opts is not None:
            o.reduceOp = opts
        opts = o
    return tensors, opts


def _op(opts, dtype) -> tuple[str, bool]:
    """The library's operator for torch's, and whether it is AVG (a sum,
    then a division)."""
    red = opts.reduceOp
    if red == _SUM:  # the common case, without the enum conversion
        return "sum", False
    code = int(red.op)
    if code == _AVG:
        if not dtype.is_floating_point:
            raise NotSupportedError(f"AVG needs a floating-point type, not {dtype}", 5)
        return "sum", True
    name = _OPS.get(code)
    if name is None:
        raise NotSupportedError(f"reduction {red.op} is not supported by hccl_rs", 5)
    return name, False


class _Completer:
    """The daemon thread of one communicator that waits for its async ops
    whose futures were asked for and completes them (in issue order, as the
    ops complete): one per communicator, so a hung op of one group holds
    back no other group's futures. Started at the first future; stopped
    when the group is shut down or aborted (:meth:`stop`) and at
    interpreter exit (:func:`_stop_completers`): a daemon thread still
    parked in the queue when Python finalizes is unwound by force, which
    takes the process down with C++'s ``terminate`` once torch's futures
    have run on it.

    It also keeps ``timed_out``: the first op of its communicator that
    failed with a timeout (what :meth:`HcclRsBackend.get_error` reports as
    ``TIMEOUT``: a timed-out op leaves the communicator unusable, but no
    background error says so)."""

    timed_out: BaseException | None = None

    def __init__(self) -> None:
        self._q: queue.SimpleQueue | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        _COMPLETERS.add(self)

    def submit(self, work: "HcclRsWork") -> None:
        with self._lock:
            if self._thread is None:
                # a queue per thread: a stopped thread may still be
                # finishing the futures queued before its stop
                self._q = queue.SimpleQueue()
                # (the thread holds the completer: it stays in _COMPLETERS,
                # stopped at exit, even once its backend is gone)
                self._thread = threading.Thread(
                    target=self._run, args=(self._q,), name="hccl_rs-futures", daemon=True
                )
                self._thread.start()
            self._q.put(work)

    def _run(self, q: queue.SimpleQueue) -> None:
        while True:
            w = q.get()
            if w is None:
                return
            w._settle_future()

    def note(self, e: BaseException) -> None:
        """Records ``e`` if it is the communicator's first timed-out op."""
        if self.timed_out is None and getattr(e, "code", None) == _CODE_TIMEOUT:
            self.timed_out = e

    def stop(self, timeout: float | None = None) -> None:
        """Lets the thread finish the futures queued and end; waits for
        that up to ``timeout`` seconds (None: does not wait, but the
        thread is still joined at exit)."""
        with self._lock:
            t, q = self._thread, self._q
            self._thread = self._q = None
        if t is not None:
            q.put(None)
            if timeout is None:
                _ENDING.add(t)
            else:
                t.join(timeout)


_COMPLETERS: "weakref.WeakSet[_Completer]" = weakref.WeakSet()
# future threads told to end (their group shut down), joined at exit
_ENDING: "weakref.WeakSet[threading.Thread]" = weakref.WeakSet()


@atexit.register
def _stop_completers(timeout: float = 30.0) -> None:
    """At exit: every future thread finishes its queue and ends (within
    ``timeout`` seconds in all)."""
    end = time.monotonic() + timeout
    for c in list(_COMPLETERS):
        c.stop(max(0.0, end - time.monotonic()))
    for t in list(_ENDING):
        t.join(max(0.0, end - time.monotonic()))


# for Works made without a backend (none of this module's)
_completer = _Completer()

# Runs each Work's finishing step (AVG's division, copies out of staging
# tensors) once, whichever thread completes it first.
_FINISH_LOCK = threading.Lock()


class HcclRsWork(_C10dWork):
    """A torch Work over an hccl_rs op: ``wait()`` blocks (GIL released),
    ``get_future()`` completes in the background with ``result`` (on
    ``completer``, its communicator's future thread). ``finish`` runs once
    after the op (AVG's division, copies out)."""

    # defaults as class attributes: a Work is made per op, and each
    # attribute set on a torch Work costs
    _finish = None
    _done = False
    _exc: BaseException | None = None
    _fut: torch.futures.Future | None = None
    _completer = _completer

    def __init__(self, native, result, finish=None, completer=None) -> None:
        super().__init__()
        self._native = native
        self._result = result
        if finish is not None:
            self._finish = finish
        if completer is not None:
            self._completer = completer

    def _complete(self) -> None:
        if not self._done:
            try:
                n = self._native
                if n is not None:
                    n.wait()
                if self._finish is not None:
                    with _FINISH_LOCK:
                        f = self._finish
                        if f is not None:
                            self._finish = None
                            f()
            except BaseException as e:  # reported to every waiter
                self._completer.note(e)
                self._exc = _dist_error(e)
            self._done = True
        if self._exc is not None:
            raise self._exc

    def _settle_future(self) -> None:
        try:
            self._complete()
        except BaseException as e:
            self._fut.set_exception(e)
            return
        self._fut.set_result(self._result)

    def _wait_for(self, seconds: float) -> bool:
        """Waits up to ``seconds`` for the op; whether it ended (its
        outcome, error included, is then :meth:`_complete`'s)."""
        n = self._native
        if self._done or n is None:
            return True
        try:
            return n.wait(seconds)
        except HcclError:
            return True

    def wait(self, timeout: timedelta = timedelta(0)) -> bool:  # noqa: B008
        """Waits for the op and raises its error. With a ``timeout`` (torch's
        default ``timedelta(0)`` is none), an op still running by then
        raises a timeout error — ``HcclTimeoutError``, also
        ``DistBackendError`` and ``TimeoutError``, as c10d's ``Work.wait``
        contract says — and goes on: wait again, or drop the Work to
        abandon it (the communicator keeps its memory until it ends)."""
        secs = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
        if secs and not self._wait_for(secs):
            ms = round(secs * 1000)
            text = (f"Work.wait(timeout={ms} ms) timed out: the op is still in flight "
                    "(wait again, or drop the Work to abandon it)")
            raise _dist_class(_errors.HcclTimeoutError)(text, 9, text)
        self._complete()
        return True

    def is_completed(self) -> bool:
        if self._done:
            return True
        n = self._native
        return n is None or n.is_completed()

    def is_success(self) -> bool:
        if not self.is_completed():
            return False
        try:
            self._complete()
        except BaseException:
            return False
        return True

    def exception(self):
        return self._exc

    def result(self):
        self._complete()
        return self._result

    def get_future(self) -> torch.futures.Future:
        if self._fut is None:
            self._fut = torch.futures.Future()
            if self._done or self._native is None:
                self._settle_future()
            else:
                self._completer.submit(self)
        return self._fut


def _done(result) -> HcclRsWork:
    return HcclRsWork(None, result)


class _Unformed:
    """The communicator of a group made with ``enable_reconfigure=True``
    before its first ``reconfigure()``: ops are refused saying so; status
    calls answer as for a destroyed communicator."""

    destroyed = True
    rank, size = 0, 1

    def __getattr__(self, name):
        raise ParameterError(
            "this hccl_rs group was made with enable_reconfigure=True: its communicator is "
            "formed by reconfigure(), which has not run yet",
            1,
        )

    def abort(self, reason=None) -> None:
        pass

    def revoke(self, reason=None) -> None:
        pass

    def destroy(self) -> None:
        pass

    def async_error(self):
        return None


_UNFORMED = _Unformed()


class _Collectives:
    """The collectives of both faces of the backend (the c10d
    :class:`HcclRsBackend` and the :class:`HcclRsProcessGroup`), over
    ``self.comm``, ``self._rank``, ``self._size``. A blocking call returns
    a finished Work when ``_blocking_work``, else None."""

    comm: _native.Comm
    _rank: int
    _size: int
    _futures: _Completer  # the communicator's future thread
    _blocking_work = True

    def getBackendName(self) -> str:  # noqa: N802 (torch's name)
        return BACKEND_NAME

    def _get_backend_name(self) -> str:
        return BACKEND_NAME

    def _go(self, opts, call: str, args: tuple, result, finish=None):
        """Runs ``comm.<call>(*args)``: blocking when ``opts`` says so,
        else async; ``finish`` runs once the op completed."""
        if opts is not None and not getattr(opts, "asyncOp", True):
            getattr(self.comm, call)(*args)
            if finish is not None:
                finish()
            return _FakeWork() if self._blocking_work else None
        return HcclRsWork(getattr(self.comm, call + "_async")(*args), result, finish, self._futures)

    # -- collectives
    def allreduce(self, tensors, opts=None):
        # (the try of _dist_errors inline: the hot path, no extra call)
        try:
            if opts.__class__ is not _AllreduceOptions or tensors.__class__ is not list:
                tensors, opts = _allreduce_args(tensors, opts)
            (t,) = tensors
            op, avg = _op(opts, t.dtype)
            if _HAS_ASYNC_OP and not opts.asyncOp:
                # dist.all_reduce's blocking path, kept short: the caller holds
                # the tensor for the whole call (a cached wrapper, no Work)
                self.comm.all_reduce(_raw_held(t), None, op)
                if avg:
                    t.div_(self._size)
                return _FakeWork() if self._blocking_work else None
            b = _raw(t, "tensor")
            finish = (lambda: t.div_(self._size)) if avg else None
            return HcclRsWork(self.comm.all_reduce_async(b, None, op), tensors, finish,
                              self._futures)
        except HcclError as e:
            self._futures.note(e)
            raise _dist_error(e) from e.__cause__

    @_dist_errors
    def allreduce_coalesced(self, tensors, opts=None):
        # one allreduce per tensor (they may differ in type and size), all
        # issued before any is waited for; `opts` is an
        # AllreduceCoalescedOptions, turned into the AllreduceOptions
        # `allreduce` takes
        tensors, opts = _allreduce_args(tensors, opts)
        if _HAS_ASYNC_OP and not opts.asyncOp:
            for t in tensors:
                self.allreduce([t], opts)
            return _FakeWork() if self._blocking_work else None
        works = [self.allreduce([t], opts) for t in tensors]
        return HcclRsWork(_WaitAll(works), tensors, None, self._futures) if works else _done(tensors)

    @_dist_errors
    def allgather(self, output_tensors, input_tensors, opts):
        (outs,) = output_tensors
        (t,) = input_tensors
        flat = torch.empty((self._size,) + tuple(t.shape), dtype=t.dtype)

        def finish():
            for i, o in enumerate(outs):
                o.copy_(flat[i])

        args = (_raw(t, "input"), _raw(flat, "output"))
        return self._go(opts, "all_gather", args, output_tensors, finish)

    @_dist_errors
    def _allgather_base(self, output, input, opts=None):
        args = (_raw(input, "input"), _raw(output, "output"))
        return self._go(opts, "all_gather", args, [output])

    @_dist_errors
    def all_gather_single(self, output, input, opts=None):
        return self._allgather_base(output, input, opts)

    @_dist_errors
    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        works = [self._allgather_base(o, i, opts) for o, i in zip(outputs, inputs)]
        return HcclRsWork(_WaitAll(works), outputs, None, self._futures) if works else _done(outputs)

    @_dist_errors
    def allgather_coalesced(self, output_lists, inputs, opts=None):
        works = [self.allgather([o], [i], opts) for o, i in zip(output_lists, inputs)]
        return HcclRsWork(_WaitAll(works), output_lists, None, self._futures) if works else _done(output_lists)

    @_dist_errors
    def reduce_scatter(self, output_tensors, input_tensors, opts):
        (out,) = output_tensors
        (ins,) = input_tensors
        op, avg = _op(opts, out.dtype)
        flat = torch.cat([i.reshape(-1) for i in ins])
        finish = _keep(flat, (lambda: out.div_(self._size)) if avg else None)
        args = (_raw(flat, "input"), _raw(out, "output"), op)
        return self._go(opts, "reduce_scatter", args, output_tensors, finish)

    @_dist_errors
    def _reduce_scatter_base(self, output, input, opts):
        op, avg = _op(opts, output.dtype)
        finish = (lambda: output.div_(self._size)) if avg else None
        args = (_raw(input, "input"), _raw(output, "output"), op)
        return self._go(opts, "reduce_scatter", args, [output], finish)

    @_dist_errors
    def reduce_scatter_single(self, output, input, opts):
        return self._reduce_scatter_base(output, input, opts)

    @_dist_errors
    def reduce_scatter_single_coalesced(self, outputs, inputs, opts):
        works = [self._reduce_scatter_base(o, i, opts) for o, i in zip(outputs, inputs)]
        return HcclRsWork(_WaitAll(works), outputs, None, self._futures) if works else _done(outputs)

    @_dist_errors
    def broadcast(self, tensors, opts):
        (t,) = tensors
        return self._go(opts, "broadcast", (_raw(t, "tensor"), opts.rootRank), tensors)

    @_dist_errors
    def reduce(self, tensors, opts):
        (t,) = tensors
        op, avg = _op(opts, t.dtype)
        root = opts.rootRank
        finish = (lambda: t.div_(self._size)) if avg and self._rank == root else None
        return self._go(opts, "reduce", (_raw(t, "tensor"), None, op, root), tensors, finish)

    @_dist_errors
    def alltoall(self, output_tensors, input_tensors, opts):
        sizes_in = [i.numel() for i in input_tensors]
        sizes_out = [o.numel() for o in output_tensors]
        dtype = input_tensors[0].dtype
        send = torch.cat([i.reshape(-1) for i in input_tensors])
        recv = torch.empty(sum(sizes_out), dtype=dtype)

        def finish():
            at = 0
            for o, n in zip(output_tensors, sizes_out):
                o.copy_(recv[at : at + n].view_as(o))
                at += n

        args = (_raw(send, "input"), _raw(recv, "output"), sizes_in, sizes_out)
        return self._go(opts, "all_to_all_v", args, output_tensors, _keep(send, finish))

    @_dist_errors
    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        if not output_split_sizes and not input_split_sizes:
            args = (_raw(input, "input"), _raw(output, "output"))
            return self._go(opts, "all_to_all", args, [output])
        n_in = input.shape[0] if input.dim() else 1
        n_out = output.shape[0] if output.dim() else 1
        row_in = input.numel() // n_in if n_in else 0
        row_out = output.numel() // n_out if n_out else 0
        ins = list(input_split_sizes) or [n_in // self._size] * self._size
        outs = list(output_split_sizes) or [n_out // self._size] * self._size
        args = (
            _raw(input, "input"),
            _raw(output, "output"),
            [s * row_in for s in ins],
            [s * row_out for s in outs],
        )
        return self._go(opts, "all_to_all_v", args, [output])

    @_dist_errors
    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        return self.alltoall_base(output, input, output_split_sizes, input_split_sizes, opts)

    @_dist_errors
    def gather_single(self, output, input, opts):
        root = opts.rootRank
        recv = _raw(output, "output") if self._rank == root else None
        return self._go(opts, "gather", (_raw(input, "input"), recv, root), [output])

    @_dist_errors
    def gather(self, output_tensors, input_tensors, opts):
        (t,) = input_tensors
        root = opts.rootRank
        if self._rank != root:
            return self._go(opts, "gather", (_raw(t, "input"), None, root), output_tensors)
        (outs,) = output_tensors
        flat = torch.empty((self._size,) + tuple(t.shape), dtype=t.dtype)

        def finish():
            for i, o in enumerate(outs):
                o.copy_(flat[i])

        args = (_raw(t, "input"), _raw(flat, "output"), root)
        return self._go(opts, "gather", args, output_tensors, finish)

    @_dist_errors
    def scatter(self, output_tensors, input_tensors, opts):
        (out,) = output_tensors
        root = opts.rootRank
        if self._rank != root:
            return self._go(opts, "scatter", (None, _raw(out, "output"), root), output_tensors)
        (ins,) = input_tensors
        flat = torch.cat([i.reshape(-1) for i in ins])
        args = (_raw(flat, "input"), _raw(out, "output"), root)
        return self._go(opts, "scatter", args, output_tensors, _keep(flat, None))

    @_dist_errors
    def barrier(self, opts=None):
        return self._go(opts, "barrier", (), [])

    @_dist_errors
    def send(self, tensors, dst, tag):
        (t,) = tensors
        return HcclRsWork(self.comm.send_async(_raw(t, "tensor"), dst), tensors, None,
                          self._futures)

    @_dist_errors
    def recv(self, tensors, src, tag):
        (t,) = tensors
        return HcclRsWork(self.comm.recv_async(_raw(t, "tensor"), src), tensors, None,
                          self._futures)

    @_dist_errors
    def abort(self) -> None:
        self.comm.abort("aborted by torch.distributed")
        # (its ops end with the abort: the thread finishes their futures)
        self._futures.stop()

    @_dist_errors
    def shutdown(self) -> None:
        self.comm.destroy()
        self._futures.stop()

    def get_error(self) -> _ErrorType:
        """torch's ``Backend.get_error``: what broke the communicator in
        the background (:meth:`hccl_rs.Comm.async_error`) as an
        ``ErrorType`` — ``REMOTE_ERROR`` for a lost peer or a peer's
        revocation, ``TIMEOUT`` once an op timed out (its group's
        ``timeout``), ``COMM_ERROR`` for the rest
        (this rank's abort or revocation, a broken link) — ``SUCCESS``
        when nothing did (a destroyed communicator included)."""
        comm = self.comm
        if comm.destroyed:
            return _ErrorType.SUCCESS
        e = comm.async_error() or self._futures.timed_out
        if e is None:
            return _ErrorType.SUCCESS
        if e.code == _CODE_TIMEOUT:
            return _ErrorType.TIMEOUT
        if e.code == _CODE_REMOTE:
            return _ErrorType.REMOTE_ERROR
        by = comm.revoked()
        if by is not None and by[0] != comm.rank:
            return _ErrorType.REMOTE_ERROR
        return _ErrorType.COMM_ERROR


class HcclRsBackend(_Collectives, _C10dBackend):
    """A c10d ``Backend`` over one hccl_rs communicator (torch's dispatcher
    reaches it: functional collectives, and every op of a process group
    when ``HCCL_RS_TORCH_PG=0``).

    A call whose options say ``asyncOp=False`` (what ``dist.*`` passes
    without ``async_op=True``) runs the blocking op and returns a finished
    Work; others return an :class:`HcclRsWork` at once.
    """

    def __init__(self, store, rank: int, size: int, timeout: timedelta, comm=None,
                 reconfigure: bool = False) -> None:
        super().__init__(rank, size)
        self._rank, self._size = rank, size
        #: the reconfigure side (handle, plan) when made with
        #: ``enable_reconfigure=True``: no communicator until reconfigure()
        self._reconfigurer = _reconfigure.Reconfigurer() if reconfigure else None
        if reconfigure:
            comm = _UNFORMED
        elif comm is None:
            if rank == 0:
                store.set(_ROOT_KEY, _native.get_root_info())
            root = store.get(_ROOT_KEY)
            comm = _native.Comm(size, bytes(root), rank, **_comm_timeouts(timeout))
        self.comm = comm
        self._futures = _Completer()
        self._store, self._timeout, self._mb_seq = store, timeout, 0
        self._in_process_group = False
        # what `options` answers (torch reads the timeout and the group's
        # name from it; splitGroup clones it)
        self._options = _C10dBackend.Options(BACKEND_NAME, timeout)

    def _set_default_timeout(self, timeout: timedelta) -> None:
        """torch's ``_set_pg_timeout``: the group's ``timeout`` from now on
        (every op's bound, see :meth:`hccl_rs.Comm.set_exec_timeout`)."""
        self.comm.set_exec_timeout(timeout)
        self._timeout = timeout
        self._options._timeout = timeout

    set_timeout = _set_default_timeout

    def monitored_barrier(self, timeout=None, wait_all_ranks: bool = False):
        """``dist.monitored_barrier``: every rank reports to rank 0 through
        the group's store, and rank 0 releases them once all have; a rank
        that does not arrive within ``timeout`` is named in rank 0's error
        (with ``wait_all_ranks``, every such rank), as Gloo's is. Through
        the store, not the communicator, so a rank that never arrives
        leaves no op half-posted on the others' streams."""
        timeout = timeout or self._timeout
        ms = int(timeout.total_seconds() * 1000)
        seq, self._mb_seq = self._mb_seq, self._mb_seq + 1
        key = f"hccl_rs/monitored_barrier/{seq}"
        store, r = self._store, self._rank
        if r != 0:
            store.set(f"{key}/arrive/{r}", "1")
            try:
                store.wait([f"{key}/release"], timeout)
            except Exception as e:  # noqa: BLE001 (the store's timeout type varies)
                raise RuntimeError(
                    f"[Rank {r}]: monitoredBarrier was not released by rank 0 within {ms} ms "
                    f"(another rank did not arrive, or rank 0 is gone): {e}"
                ) from None
            return None
        start = time.monotonic()
        failed = []
        for q in range(1, self._size):
            left = timeout - timedelta(seconds=time.monotonic() - start)
            try:
                store.wait([f"{key}/arrive/{q}"], max(left, timedelta(milliseconds=1)))
            except Exception:  # noqa: BLE001
                if not wait_all_ranks:
                    raise RuntimeError(
                        f"[Rank 0]: Rank {q} failed to pass monitoredBarrier in {ms} ms"
                    ) from None
                failed.append(q)
        if failed:
            raise RuntimeError(
                f"[Rank 0]: Ranks {', '.join(map(str, failed))} failed to pass monitoredBarrier "
                f"in {ms} ms"
            )
        for q in range(1, self._size):
            store.delete_key(f"{key}/arrive/{q}")
        if seq > 0:
            # every rank arrived here, so all have left the previous call
            store.delete_key(f"hccl_rs/monitored_barrier/{seq - 1}/release")
        store.set(f"{key}/release", "1")
        return None

    # -- capabilities torch asks a backend for. A Python backend must
    # answer every one itself: torch's C++ trampoline (PyBackend) reads the
    # Python attribute, and the inherited one is the C++ property that
    # calls the trampoline again (RecursionError). Every property of
    # torch's Backend that goes through the trampoline is here.
    @property
    def supports_splitting(self) -> bool:
        # split_group works on the process group (HcclRsProcessGroup
        # splits itself); a plain Backend under torch's C++ group cannot
        return self._in_process_group

    @property
    def supports_coalescing(self) -> bool:
        return False

    @property
    def _supports_time_estimate(self) -> bool:
        return False

    # the name older code of this module used
    supports_time_estimate = _supports_time_estimate

    @property
    def supports_shrinking(self) -> bool:
        # (Comm.shrink: multi-process communicators, which every torch
        # group of this backend is)
        return True

    @property
    def supports_reconfigure(self) -> bool:
        # only a group made in the reconfigure regime
        # (enable_reconfigure=True) is formed by reconfigure(); torchft's
        # Manager takes a native group only if this says True
        return self._reconfigurer is not None

    def rank(self) -> int:
        """This rank in the group's current communicator (reconfigure
        changes it; torch's C++ side keeps the value it was made with)."""
        return self._rank

    def size(self) -> int:
        """The current communicator's size (see :meth:`rank`)."""
        return self._size

    @_dist_errors
    def shrink(self, ranks_to_exclude, shrink_flags: int = 0, opts_override=None):
        """torch's ``Backend.shrink`` (``dist.shrink_group``): a new
        :class:`HcclRsBackend` over :meth:`hccl_rs.Comm.shrink` — the
        ranks not in ``ranks_to_exclude`` (each calls it, the excluded
        never do), renumbered in order, meeting over this communicator's
        control plane (no store, no root info). ``SHRINK_ABORT`` revokes
        this communicator first, ending every rank's ops in flight on it.
        ``opts_override``'s timeout, when given, is the new group's."""
        if shrink_flags == getattr(dist, "SHRINK_ABORT", 1):
            self.comm.revoke("shrink_group(SHRINK_ABORT)")
        timeout = self._timeout
        if opts_override is not None:
            timeout = getattr(opts_override, "_timeout", None) or timeout
        new = self.comm.shrink([int(r) for r in ranks_to_exclude])
        if timeout != self._timeout:
            new.set_exec_timeout(timeout)
        store = dist.PrefixStore(f"hccl_rs/shrunk/{new.name}/", self._store)
        b = HcclRsBackend(store, new.rank, new.size, timeout, comm=new)
        o = b._options
        o.group_name = self._options.group_name
        if opts_override is not None and getattr(opts_override, "group_name", ""):
            o.group_name = opts_override.group_name
        return b

    def get_reconfigure_handle(self) -> str:
        """torch's ``get_reconfigure_handle``: this group's opaque handle
        for its peers (JSON: a random id and the address of a TCPStore
        this group hosts; see :mod:`hccl_rs._reconfigure`)."""
        return self._need_reconfigurer().handle()

    @_dist_errors
    def reconfigure(self, opts):
        """torch's ``reconfigure(ReconfigureOptions)``: forms this group's
        communicator anew for the members ``opts.handles`` lists (a list:
        ranks by position; a set: ordered by handle), under the fresh
        ``opts.uuid``, within ``opts.timeout`` (default the group's). When
        the new members are the old ones minus some, plus new processes,
        the old members shrink and grow their communicator; otherwise a
        fresh one is made (see :mod:`hccl_rs._reconfigure`). Blocks until
        the communicator is formed; returns a finished Work."""
        rc = self._need_reconfigurer()
        old = None if self.comm is _UNFORMED else self.comm
        new = rc.run(old, opts, _comm_timeouts(self._timeout), self._timeout)
        self._adopt(new)
        return _FakeWork()

    def _need_reconfigurer(self):
        if self._reconfigurer is None:
            raise NotSupportedError(
                "reconfigure: this hccl_rs group was not made with enable_reconfigure=True "
                "(its communicator is formed at creation)",
                5,
            )
        return self._reconfigurer

    def _adopt(self, comm) -> None:
        """Makes ``comm`` this group's communicator (after reconfigure):
        a new future thread for it, the old one ended."""
        old_futures = self._futures
        self.comm = comm
        self._rank, self._size = comm.rank, comm.size
        self._futures = _Completer()
        old_futures.stop()
        owner = self._owner() if self._owner is not None else None
        if owner is not None:
            owner.comm, owner._rank, owner._size = comm, comm.rank, comm.size
            owner._futures = self._futures

    _owner = None  # weakref to the HcclRsProcessGroup over this backend

    @property
    def supports_window(self) -> bool:
        return False

    @property
    def options(self):
        """The backend's ``Backend.Options``: its name and timeout (and
        the group's name and global ranks once torch's creator set them)."""
        return self._options


class HcclRsProcessGroup(_Collectives, _ProcessGroup):
    """The process group ``init_process_group("hccl_rs")`` and
    ``new_group`` make: a ``ProcessGroup`` subclass whose collectives are
    Python methods, so ``dist.all_reduce`` & co. call them directly instead
    of through torch's C++ dispatcher (which costs several microseconds per
    call to reach a Python backend). C++ callers (DDP's reducer) reach the
    same methods through the ProcessGroup's virtual functions. An
    :class:`HcclRsBackend` over the same communicator is registered for
    the CPU device too, for what goes through the dispatcher (functional
    collectives) and torch's backend queries.

    Blocking calls (``asyncOp=False``) return None, which ``dist.*``
    takes as "already complete".
    """

    def __init__(self, store, rank: int, size: int, timeout: timedelta,
                 reconfigure: bool = False) -> None:
        super().__init__(store, rank, size)
        self._rank, self._size = rank, size
        self._backend = HcclRsBackend(store, rank, size, timeout, reconfigure=reconfigure)
        self._backend._in_process_group = True
        self._backend._owner = weakref.ref(self)
        self.comm = self._backend.comm
        self._futures = self._backend._futures
        self._register_backend(torch.device("cpu"), _CUSTOM, self._backend)
        self._set_default_backend(_CUSTOM)

    _blocking_work = False

    @_dist_errors
    def split_group(self, ranks, timeout=None, opts=None, group_name=None, group_desc=None,
                    device_types=None):
        """``dist.split_group``: a new group of this group's ``ranks``
        (this rank among them), its communicator made by those ranks alone
        through the parent's store; None on a rank outside ``ranks``."""
        ranks = [int(q) for q in ranks]
        if self._rank not in ranks:
            return None
        name = group_name or f"split:{','.join(map(str, ranks))}"
        store = dist.PrefixStore(f"hccl_rs/split/{name}", self._backend._store)
        pg = HcclRsProcessGroup(store, ranks.index(self._rank), len(ranks),
                                timeout or self._backend._timeout)
        pg._set_group_name(name)
        if group_desc is not None:
            pg._set_group_desc(group_desc)
        return pg

    def monitored_barrier(self, timeout=None, wait_all_ranks: bool = False):
        """``dist.monitored_barrier`` (see :meth:`HcclRsBackend.monitored_barrier`)."""
        return self._backend.monitored_barrier(timeout, wait_all_ranks)

    def set_timeout(self, timeout: timedelta) -> None:
        """``dist.set_timeout``: the group's timeout from now on (see
        :meth:`HcclRsBackend._set_default_timeout`)."""
        self._backend._set_default_timeout(timeout)

    def get_error(self):
        """The backend's :meth:`HcclRsBackend.get_error`."""
        return self._backend.get_error()

    # the capabilities torch's ProcessGroup asks its default backend for,
    # answered here directly (see HcclRsBackend's)
    @property
    def supports_reconfigure(self) -> bool:
        return self._backend.supports_reconfigure

    @property
    def supports_window(self) -> bool:
        return self._backend.supports_window

    def get_reconfigure_handle(self) -> str:
        """The backend's :meth:`HcclRsBackend.get_reconfigure_handle`."""
        return self._backend.get_reconfigure_handle()

    def reconfigure(self, opts):
        """The backend's :meth:`HcclRsBackend.reconfigure` (this group's
        communicator, rank and size change with it)."""
        return self._backend.reconfigure(opts)

    def rank(self) -> int:
        """This rank in the current communicator (see
        :meth:`HcclRsBackend.rank`)."""
        return self._rank

    def size(self) -> int:
        """The current communicator's size."""
        return self._size

    def __repr__(self) -> str:
        return f"HcclRsProcessGroup(rank={self._rank}, size={self._size})"


class _WaitAll:
    """Waits for several Works as one native handle would."""

    def __init__(self, works) -> None:
        self._works = works

    def wait(self, timeout: float | None = None) -> bool:
        """As a native handle's: False if they have not all completed
        within ``timeout`` seconds."""
        if timeout is not None:
            end = time.monotonic() + timeout
            for w in self._works:
                if not w._wait_for(max(0.0, end - time.monotonic())):
                    return False
        for w in self._works:
            w.wait()
        return True

    def is_completed(self) -> bool:
        return all(w.is_completed() for w in self._works)


def _keep(tensor, finish):
    """A finish step that also keeps ``tensor`` (a staging copy the op
    reads) referenced until the op completed."""

    def run():
        _ = tensor
        if finish is not None:
            finish()

    return run


@_dist_errors
def _create(opts, backend_options=None):
    """torch's creator (its extended form, which passes every option of
    the group, ``enable_reconfigure`` included): a
    :class:`HcclRsProcessGroup`, or with ``HCCL_RS_TORCH_PG=0`` a plain
    :class:`HcclRsBackend` (every call then goes through torch's
    dispatcher).

    With ``enable_reconfigure=True`` the group has no communicator until
    ``reconfigure()`` forms one (torch's fault-tolerance regime; see
    :meth:`HcclRsBackend.reconfigure`)."""
    store, rank, size, timeout = opts.store, opts.group_rank, opts.group_size, opts.timeout
    rc = bool(getattr(opts, "enable_reconfigure", False))
    if os.environ.get("HCCL_RS_TORCH_PG", "1") == "0":
        made = HcclRsBackend(store, rank, size, timeout, reconfigure=rc)
        backend = made
    else:
        made = HcclRsProcessGroup(store, rank, size, timeout, reconfigure=rc)
        backend = made._backend
    o = backend._options
    o.group_name = str(opts.group_id)
    o.global_ranks_in_group = list(opts.global_ranks_in_group)
    return made


def agree_lost(group=None, timeout: timedelta | None = None) -> list[int]:
    """The ranks of ``group`` (default: the default group) lost — dead
    processes, destroyed communicators — as every surviving rank agrees
    (each survivor calls it and gets the same sorted list;
    :meth:`hccl_rs.Comm.agree_lost`): what to pass to
    ``dist.shrink_group`` when nobody was told who died::

        dist.shrink_group(hccl_rs.torch.agree_lost())
    """
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    backend = pg._get_backend(torch.device("cpu"))
    comm = getattr(backend, "comm", None)
    if comm is None:
        raise NotSupportedError(f"agree_lost: {pg!r} is not an hccl_rs group", 5)
    return _dist_errors(comm.agree_lost)(timeout)


def register() -> None:
    """Registers the ``"hccl_rs"`` backend for CPU tensors (idempotent;
    importing this module does it)."""
    if BACKEND_NAME.upper() in getattr(dist.Backend, "_plugins", {}):
        return
    dist.Backend.register_backend(BACKEND_NAME, _create, extended_api=True, devices=["cpu"])


register()

# CPU kernels of torch.ops.symm_mem.fused_matmul_reduce_scatter and
# fused_all_gather_matmul over hccl_rs groups (see hccl_rs._torch_fused)
from . import _torch_fused  # noqa: E402

_torch_fused.register()
