"""torchft with hccl_rs against torchft with Gloo: two replica groups
(one process each) train the same model from the same seed under
torchft's Manager and DDP; one replica is killed (SIGKILL) mid-run and
restarted, rejoins (healing from its peer) and both train to the end.

    python -m hccl_rs.bench_torchft                 # both backends, prints the figures
    python -m hccl_rs.bench_torchft --steps 60 --kill-at 25

Reports, per backend: whether the final weights of the two replicas are
equal and equal to the other backend's, the recovery time (from the kill
to the survivor's first committed step after it, and to the restarted
replica's), and the cross-replica allreduce time of DDP's gradient
buckets (from ``manager.allreduce`` to its ``wait()`` returning) and the
whole step time, p50 / p99 over the healthy steps, with the ratio
hccl_rs / Gloo. No figure is asserted: the test suite checks the weights
(test_torchft.py); this prints.

``python -m hccl_rs.bench_torchft replica ...`` is one replica (what the
driver starts, and the tests).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import timedelta

#: the model's layer widths (an MLP; about 1.6 M parameters, 6.4 MB of
#: gradients per step: the cross-replica allreduce is a large part of it)
WIDTHS = (512, 1024, 1024, 10)
BATCH = 16


def _model():
    import torch
    from torch import nn

    layers = []
    for a, b in zip(WIDTHS, WIDTHS[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def _batch(step: int, replica: int):
    """Each replica's data at each step: a function of both only, so a
    retried step and a restarted replica see the same batch."""
    import torch

    g = torch.Generator().manual_seed(step * 1000 + replica)
    return torch.randn(BATCH, WIDTHS[0], generator=g), torch.randint(WIDTHS[-1], (BATCH,), generator=g)


def replica(backend: str, rid: int, lighthouse: str, steps: int, out: str,
            kill_at: int = -1, timeout: float = 10.0) -> None:
    """One replica group of one process: trains until ``steps`` steps are
    committed, writes its final state and its step records to ``out``
    (``.pt`` and ``.json``); with ``kill_at`` >= 0 it kills itself
    (SIGKILL, after noting the time) in the forward pass of that step."""
    import torch
    import torch.distributed as dist
    from torch import nn, optim
    from torchft import Manager
    from torchft.ddp import DistributedDataParallel
    from torchft.optim import OptimizerWrapper

    torch.set_num_threads(1)
    t = timedelta(seconds=timeout)
    if backend == "hccl_rs":
        from hccl_rs.torchft import ProcessGroupHcclRs

        pg = ProcessGroupHcclRs(timeout=t)
    else:
        from torchft.process_group import ProcessGroupGloo

        pg = ProcessGroupGloo(timeout=t)
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    torch.manual_seed(42)
    model = _model()
    opt_inner = optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def state_dict():
        return {"model": model.state_dict(), "optim": opt_inner.state_dict()}

    def load_state_dict(sd):
        model.load_state_dict(sd["model"])
        opt_inner.load_state_dict(sd["optim"])

    manager = Manager(
        pg=pg, min_replica_size=2, load_state_dict=load_state_dict, state_dict=state_dict,
        replica_id=f"replica_{rid}", store_addr="127.0.0.1", store_port=store.port, rank=0,
        world_size=1, lighthouse_addr=lighthouse, timeout=t, quorum_timeout=timedelta(seconds=60),
        connect_timeout=timedelta(seconds=30),
    )
    ddp = DistributedDataParallel(manager, model)
    opt = OptimizerWrapper(manager, opt_inner)
    loss_fn = nn.CrossEntropyLoss()

    # the cross-replica allreduce of each gradient bucket: DDP's hook
    # waits for it right after issuing it, so issue -> wait() returning
    allreduce_s: list[float] = []
    issue = manager.allreduce

    def timed_allreduce(tensor, *a, **k):
        t0 = time.perf_counter()
        w = issue(tensor, *a, **k)
        inner_wait = w.wait

        def wait(*wa, **wk):
            ok = inner_wait(*wa, **wk)
            allreduce_s.append(time.perf_counter() - t0)
            return ok

        w.wait = wait
        return w

    manager.allreduce = timed_allreduce
    records = []
    while manager.current_step() < steps:
        step = manager.current_step()
        x, y = _batch(step, rid)
        t0 = time.perf_counter()
        n_ar = len(allreduce_s)
        opt.zero_grad()
        if step == kill_at:
            # the kill must land inside a step both replicas are in: the
            # quorum zero_grad() requested (on torchft's thread) is waited
            # for first. Killed before that request reached the lighthouse,
            # the survivor's step would wait for a quorum of min_replicas=2
            # until the restarted process joined (seconds, under load), and
            # the survivor's failed step would measure the restart instead
            # of the backend's loss detection.
            manager.wait_quorum()
            with open(out + ".killed", "w") as f:
                f.write(repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)
        loss = loss_fn(ddp(x), y)
        loss.backward()
        opt.step()
        committed = manager.current_step() > step
        # why a step did not commit: the error its allreduce reported (the
        # backend's message, e.g. the lost peer it names), else none
        err = manager.errored()
        records.append({
            "error": None if err is None else str(getattr(err, "original_exception", err)),
            "step": step, "committed": committed, "wall_end": time.time(),
            "step_s": time.perf_counter() - t0, "allreduce_s": allreduce_s[n_ar:],
            "participants": manager.num_participants(),
            # how hccl_rs formed its communicator at the last reconfigure
            "path": getattr(pg, "last_path", None),
        })
    torch.save(model.state_dict(), out + ".pt")
    with open(out + ".json", "w") as f:
        json.dump({"backend": backend, "replica": rid, "records": records}, f)
    manager.shutdown(wait=False)
    pg.shutdown()
    print(f"replica {rid} ({backend}) done: {steps} steps committed", flush=True)
    # (torchft's threads can hold the interpreter's exit)
    sys.stdout.flush()
    os._exit(0)


def _spawn(args, log):
    return subprocess.Popen(
        [sys.executable, "-m", "hccl_rs.bench_torchft", "replica", *map(str, args)],
        stdout=log, stderr=subprocess.STDOUT,
        # (in the driver's process group: whoever bounds the driver, a
        # test's harness, kills the replicas with it)
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )


def _kill_all(procs):
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def run(backend: str, steps: int, kill_at: int, tmp: str, limit: float = 300.0) -> dict:
    """Two replicas under a lighthouse; replica 1 killed at ``kill_at``
    (if >= 0) and restarted; returns what each wrote."""
    from torchft._torchft import LighthouseServer

    lh = LighthouseServer(bind="[::]:0", min_replicas=2, join_timeout_ms=100,
                          heartbeat_timeout_ms=1000)
    outs = [os.path.join(tmp, f"{backend}-{r}") for r in (0, 1)]
    logs = [open(o + ".log", "w") for o in outs]
    procs = []
    end = time.monotonic() + limit
    try:
        procs.append(_spawn([backend, 0, lh.address(), steps, outs[0]], logs[0]))
        procs.append(_spawn([backend, 1, lh.address(), steps, outs[1], kill_at], logs[1]))
        restarted_at = None
        if kill_at >= 0:
            while procs[1].poll() is None:
                if time.monotonic() > end:
                    raise TimeoutError(f"{backend}: replica 1 was not killed in time")
                time.sleep(0.005)
            if procs[1].returncode != -signal.SIGKILL:
                raise RuntimeError(f"{backend}: replica 1 ended with {procs[1].returncode}")
            # a new process, as a job scheduler would start it
            restarted_at = time.time()
            procs.append(_spawn([backend, 1, lh.address(), steps, outs[1]], logs[1]))
        for p in (procs[0], procs[-1]):
            p.wait(timeout=max(1.0, end - time.monotonic()))
            if p.returncode != 0:
                raise RuntimeError(f"{backend}: a replica failed ({p.returncode}); see {tmp}")
    finally:
        _kill_all(procs)
        for f in logs:
            f.close()
        lh.shutdown()
    res = {"restarted_at": restarted_at}
    for r, o in enumerate(outs):
        with open(o + ".json") as f:
            res[r] = json.load(f)["records"]
    if kill_at >= 0:
        with open(outs[1] + ".killed") as f:
            res["killed_at"] = float(f.read())
    return res


def _pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


def summarize(res: dict, kill_at: int) -> dict:
    """Recovery times and the healthy steps' timings of one run."""
    out = {}
    if "killed_at" in res:
        k = res["killed_at"]
        failed = [rec for rec in res[0] if not rec["committed"] and rec["wall_end"] > k]
        out["failed_step_s"] = failed[0]["wall_end"] - k if failed else float("nan")
        out["failed_step_error"] = failed[0].get("error") if failed else None
        after = [rec for rec in res[0] if rec["committed"] and rec["wall_end"] > k]
        out["recovery_survivor_s"] = after[0]["wall_end"] - k if after else float("nan")
        back = [rec for rec in res[1] if rec["committed"]]
        out["recovery_restarted_s"] = back[0]["wall_end"] - k if back else float("nan")
        out["restart_delay_s"] = res["restarted_at"] - k
        out["paths"] = sorted({rec["path"] for rec in res[0] + res[1] if rec["path"]})
    # healthy: both replicas participating, away from the start and the kill
    healthy = [rec for rec in res[0] if rec["committed"] and rec["participants"] == 2
               and rec["step"] >= 3 and not (kill_at - 1 <= rec["step"] <= kill_at + 2)]
    ar = [s for rec in healthy for s in rec["allreduce_s"]]
    st = [rec["step_s"] for rec in healthy]
    out.update(allreduce_p50=_pct(ar, 50), allreduce_p99=_pct(ar, 99), step_p50=_pct(st, 50),
               step_p99=_pct(st, 99), healthy_steps=len(healthy), allreduces=len(ar))
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd")
    rp = sub.add_parser("replica")
    rp.add_argument("backend", choices=["hccl_rs", "gloo"])
    rp.add_argument("rid", type=int)
    rp.add_argument("lighthouse")
    rp.add_argument("steps", type=int)
    rp.add_argument("out")
    rp.add_argument("kill_at", type=int, nargs="?", default=-1)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--kill-at", type=int, default=25)
    ap.add_argument("--backends", default="gloo,hccl_rs")
    ap.add_argument("--dir", help="where the weights, logs and summary.json go (default: a new "
                    "temporary directory)")
    a = ap.parse_args(argv)
    if a.cmd == "replica":
        replica(a.backend, a.rid, a.lighthouse, a.steps, a.out, a.kill_at)
        return
    import torch

    tmp = a.dir or tempfile.mkdtemp(prefix="hccl_rs_bench_torchft_")
    os.makedirs(tmp, exist_ok=True)
    results, finals, raw = {}, {}, {}
    for b in a.backends.split(","):
        raw[b] = run(b, a.steps, a.kill_at, tmp)
        results[b] = summarize(raw[b], a.kill_at)
        finals[b] = [torch.load(os.path.join(tmp, f"{b}-{r}.pt")) for r in (0, 1)]
    with open(os.path.join(tmp, "summary.json"), "w") as f:
        json.dump({"summary": results, "runs": raw}, f)

    def same(x, y):
        return all(torch.equal(x[k], y[k]) for k in x)

    print(f"torchft, 2 replica groups x 1 process, MLP {'-'.join(map(str, WIDTHS))}, "
          f"batch {BATCH}, {a.steps} steps, replica 1 killed (SIGKILL) at step {a.kill_at} "
          "and restarted")
    for b, s in results.items():
        print(f"[{b}] replicas' final weights equal: {'yes' if same(*finals[b]) else 'NO'}")
        if "recovery_survivor_s" in s:
            print(f"[{b}] kill -> survivor's step failed: {s['failed_step_s'] * 1e3:.0f} ms; "
                  f"-> survivor's first committed step: {s['recovery_survivor_s'] * 1e3:.0f} ms; "
                  f"-> restarted replica's first committed step: {s['recovery_restarted_s'] * 1e3:.0f} ms "
                  f"(restart issued {s['restart_delay_s'] * 1e3:.0f} ms after the kill, so "
                  f"{(s['recovery_survivor_s'] - s['restart_delay_s']) * 1e3:.0f} ms from the restart)")
            if s["paths"]:
                print(f"[{b}] communicators formed by: {', '.join(s['paths'])}")
        print(f"[{b}] cross-replica allreduce p50 / p99: {s['allreduce_p50'] * 1e3:.2f} / "
              f"{s['allreduce_p99'] * 1e3:.2f} ms ({s['allreduces']} over {s['healthy_steps']} healthy steps); "
              f"step p50 / p99: {s['step_p50'] * 1e3:.2f} / {s['step_p99'] * 1e3:.2f} ms")
    if "gloo" in results and "hccl_rs" in results:
        g, h = results["gloo"], results["hccl_rs"]
        print(f"final weights hccl_rs == Gloo (bitwise): "
              f"{'yes' if same(finals['hccl_rs'][0], finals['gloo'][0]) else 'NO'}")
        print(f"ratio hccl_rs / Gloo: allreduce p50 {h['allreduce_p50'] / g['allreduce_p50']:.2f}x, "
              f"p99 {h['allreduce_p99'] / g['allreduce_p99']:.2f}x; step p50 "
              f"{h['step_p50'] / g['step_p50']:.2f}x, p99 {h['step_p99'] / g['step_p99']:.2f}x")
    print(f"(logs and weights in {tmp})")


if __name__ == "__main__":
    main()
