"""``python -m hccl_rs.bench``: hccl_rs against Gloo under torch.distributed.

For each rank count (``--ranks 2,4``) it launches the ranks as processes
once per backend and times, on the same machine in the same run:
``dist.all_reduce`` / ``all_gather_into_tensor`` / ``reduce_scatter_tensor``
of fp32 from 8 B to 64 MiB, and DistributedDataParallel training steps
(``--ddp-model``: an embedding-heavy text classifier, 6.5 M parameters,
and a 1.6 M-parameter MLP).
It prints, per size, both backends' p50 / p99 / max time (from rank 0's
per-iteration times: averages hide stalls), the bus bandwidth at p50, and
the ratios hccl_rs / Gloo (time: below 1 is faster; bus bandwidth: above
1 is faster). ``--numpy`` adds the NumPy API's 8 B AllReduce.

    python -m hccl_rs.bench                     # p = 2 and 4, 8 B - 64 MiB
    python -m hccl_rs.bench --ranks 2 --max-bytes 1M --ddp-steps 20
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time

OPS = ("all_reduce", "all_gather", "reduce_scatter")


def _sizes(lo: int, hi: int, factor: int) -> list[int]:
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= factor
    if out and out[-1] < hi:
        out.append(hi)  # the largest size always runs
    return out


def _parse_bytes(s: str) -> int:
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.strip().upper().rstrip("B") or "0"
    return int(float(s[:-1]) * mult[s[-1]]) if s[-1] in mult else int(s)


def _iters(nbytes: int, scale: float) -> tuple[int, int]:
    """(warm-up, timed) iterations for a message of ``nbytes``."""
    if nbytes <= 64 << 10:
        w, n = 50, 500
    elif nbytes <= 4 << 20:
        w, n = 5, 50
    else:
        w, n = 2, 10
    return max(1, int(w * scale)), max(3, int(n * scale))


def _stats(ts: list[float]) -> dict:
    s = sorted(ts)
    pick = lambda q: s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]  # noqa: E731
    return {"p50": pick(0.5), "p99": pick(0.99), "max": s[-1], "mean": sum(s) / len(s)}


def _busbw(op: str, nbytes: int, p: int, t: float) -> float:
    """Bus bandwidth (GB/s) as nccl-tests count it: ``nbytes`` is the whole
    buffer (AllReduce's, AllGather's output, ReduceScatter's input)."""
    f = 2 * (p - 1) / p if op == "all_reduce" else (p - 1) / p
    return nbytes * f / t / 1e9 if t > 0 else 0.0


# ----------------------------------------------------------------- workers


def _worker(args) -> None:
    if args.backend == "hccl_rs":
        import hccl_rs.torch  # noqa: F401  (registers the backend, THP first)
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group(args.backend)
    r, p = dist.get_rank(), dist.get_world_size()
    res: dict = {"ops": {}, "ddp": None, "numpy": None}
    for op in OPS:
        for nbytes in _sizes(args.min_bytes, args.max_bytes, args.factor):
            n = max(p, nbytes // 4 // p * p)  # elements, divisible by p
            if op == "all_reduce":
                buf = torch.ones(n)
                fn = lambda: dist.all_reduce(buf)  # noqa: E731
            elif op == "all_gather":
                out, inp = torch.empty(n), torch.ones(n // p)
                fn = lambda: dist.all_gather_into_tensor(out, inp)  # noqa: E731
            else:
                out, inp = torch.empty(n // p), torch.ones(n)
                fn = lambda: dist.reduce_scatter_tensor(out, inp)  # noqa: E731
            warm, iters = _iters(nbytes, args.scale)
            for _ in range(warm):
                fn()
            dist.barrier()
            ts = []
            for _ in range(iters):
                t0 = time.perf_counter()
                fn()
                ts.append(time.perf_counter() - t0)
            res["ops"].setdefault(op, {})[str(n * 4)] = _stats(ts)
    if args.ddp_steps:
        res["ddp"] = {}
        for name in [m for m in args.ddp_model.split(",") if m]:
            res["ddp"][name] = _ddp(name, args)
    if args.numpy and args.backend == "hccl_rs":
        import numpy as np

        import hccl_rs

        comm = hccl_rs.Comm(p, _root_info(dist), r)
        a = np.ones(2, np.float32)
        for _ in range(1000):
            comm.all_reduce(a)
        comm.barrier()
        ts = []
        for _ in range(20000):
            t0 = time.perf_counter()
            comm.all_reduce(a)
            ts.append(time.perf_counter() - t0)
        res["numpy"] = _stats(ts)
        comm.destroy()
    dist.barrier()
    if r == 0:
        print("BENCH " + json.dumps(res), flush=True)
    dist.destroy_process_group()


def _ddp_model(name: str, batch: int):
    """(model, inputs, labels) of a DDP benchmark model."""
    import torch
    import torch.nn as nn

    torch.manual_seed(0)
    if name == "text":
        # a bag-of-words text classifier (fastText-like): a 50k x 128
        # embedding table with dense gradients and a small MLP head. 6.5 M
        # parameters (26 MB of gradients) against little compute:
        # communication-heavy, as embedding-heavy models are.
        class Text(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.emb = nn.EmbeddingBag(50000, 128, mode="mean")
                self.head = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10))

            def forward(self, tokens):
                return self.head(self.emb(tokens))

        model = Text()
        x = torch.randint(0, 50000, (batch, 64))
    elif name == "mlp":
        # a 3-layer MLP, 1.6 M parameters: compute and communication closer
        model = nn.Sequential(
            nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)
        )
        x = torch.randn(batch, 512)
    else:
        raise SystemExit(f"unknown --ddp-model {name!r} (text, mlp)")
    return model, x, torch.randint(0, 10, (batch,))


def _ddp(name: str, args) -> dict:
    """Per-step times of DDP training ``name`` (default DDP settings:
    25 MiB buckets, gradients copied into them)."""
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    model, x, y = _ddp_model(name, args.ddp_batch)
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    ts = []
    for i in range(args.ddp_steps + 3):
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad()
        nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()
        if i >= 3:
            ts.append(time.perf_counter() - t0)
    out = _stats(ts)
    out["params"] = sum(q.numel() for q in model.parameters())
    out["batch"] = args.ddp_batch
    return out


def _root_info(dist) -> bytes:
    import hccl_rs

    objs = [hccl_rs.get_root_info() if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(objs, src=0)
    return objs[0]


# ---------------------------------------------------------------- launcher


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(backend: str, p: int, args) -> dict:
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()),
               WORLD_SIZE=str(p), OMP_NUM_THREADS="1")
    argv = [sys.executable, "-m", "hccl_rs.bench", "--worker", "--backend", backend,
            "--min-bytes", str(args.min_bytes), "--max-bytes", str(args.max_bytes),
            "--factor", str(args.factor), "--scale", str(args.scale),
            "--ddp-steps", str(args.ddp_steps), "--ddp-batch", str(args.ddp_batch),
            "--ddp-model", args.ddp_model] + (["--numpy"] if args.numpy else [])
    procs = [
        subprocess.Popen(argv, env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
        for r in range(p)
    ]
    outs = []
    try:
        for pr in procs:
            outs.append(pr.communicate(timeout=args.timeout))
    finally:
        for pr in procs:
            if pr.poll() is None:
                os.killpg(pr.pid, 9)
                pr.wait()
    for pr, (_o, e) in zip(procs, outs):
        if pr.returncode != 0:
            raise RuntimeError(f"{backend} p={p}: a rank failed ({pr.returncode}):\n{e[-3000:]}")
    for line in outs[0][0].splitlines():
        if line.startswith("BENCH "):
            return json.loads(line[6:])
    raise RuntimeError(f"{backend} p={p}: no result:\n{outs[0][1][-3000:]}")


def _fmt_us(t: float) -> str:
    return f"{t * 1e6:10.1f}"


def _report(p: int, res: dict, out) -> None:
    h, g = res["hccl_rs"], res["gloo"]
    print(f"\n== p = {p} processes, fp32 (times in us from rank 0; ratio = hccl_rs / gloo)", file=out)
    for op in OPS:
        print(f"\n{op}", file=out)
        print(
            f"{'bytes':>10} | {'hccl p50':>10} {'p99':>10} {'max':>10} | {'gloo p50':>10} {'p99':>10}"
            f" {'max':>10} | {'time':>6} {'p99':>6} | {'busbw GB/s':>10} {'gloo':>8} {'ratio':>6}",
            file=out,
        )
        for nb in h["ops"][op]:
            a, b = h["ops"][op][nb], g["ops"][op][nb]
            n = int(nb)
            bw_a, bw_b = _busbw(op, n, p, a["p50"]), _busbw(op, n, p, b["p50"])
            print(
                f"{n:>10} | {_fmt_us(a['p50'])} {_fmt_us(a['p99'])} {_fmt_us(a['max'])} |"
                f" {_fmt_us(b['p50'])} {_fmt_us(b['p99'])} {_fmt_us(b['max'])} |"
                f" {a['p50'] / b['p50']:6.3f} {a['p99'] / b['p99']:6.3f} |"
                f" {bw_a:10.3f} {bw_b:8.3f} {bw_a / bw_b if bw_b else 0:6.2f}",
                file=out,
            )
    for name, a in (h.get("ddp") or {}).items():
        b = g["ddp"][name]
        print(f"\nDDP step, {name} model ({a['params']} parameters, batch {a['batch']}): ms", file=out)
        print(f"{'':>8} {'p50':>8} {'p99':>8} {'max':>8}", file=out)
        for who, s in (("hccl_rs", a), ("gloo", b)):
            print(f"{who:>8} {s['p50'] * 1e3:8.2f} {s['p99'] * 1e3:8.2f} {s['max'] * 1e3:8.2f}", file=out)
        print(f"{'ratio':>8} {a['p50'] / b['p50']:8.3f} {a['p99'] / b['p99']:8.3f} {a['max'] / b['max']:8.3f}", file=out)
    if h.get("numpy"):
        s = h["numpy"]
        print(
            f"\nNumPy API 8 B AllReduce: p50 {s['p50'] * 1e6:.2f} us, p99 {s['p99'] * 1e6:.2f} us,"
            f" max {s['max'] * 1e6:.1f} us",
            file=out,
        )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hccl_rs.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="2,4", help="rank counts, comma-separated (default 2,4)")
    ap.add_argument("--min-bytes", type=_parse_bytes, default=8)
    ap.add_argument("--max-bytes", type=_parse_bytes, default=64 << 20)
    ap.add_argument("--factor", type=int, default=8, help="size step (default 8)")
    ap.add_argument("--scale", type=float, default=1.0, help="scales the iteration counts")
    ap.add_argument("--ddp-steps", type=int, default=30)
    ap.add_argument(
        "--ddp-batch", type=int, default=8,
        help="DDP batch (default 8: a step whose gradients' AllReduce matters)",
    )
    ap.add_argument(
        "--ddp-model", default="text,mlp",
        help="DDP models, comma-separated: text (6.5 M parameters, embedding-heavy), "
        "mlp (1.6 M); default both",
    )
    ap.add_argument("--numpy", action="store_true", help="also the NumPy API's 8 B AllReduce")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--json", help="also write the raw results here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--backend", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        _worker(args)
        return 0
    raw = {}
    for p in [int(x) for x in args.ranks.split(",") if x]:
        res = {b: _launch(b, p, args) for b in ("hccl_rs", "gloo")}
        raw[p] = res
        _report(p, res, sys.stdout)
        sys.stdout.flush()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(raw, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
