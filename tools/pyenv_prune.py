"""Keeps the test venv's PyTorch small enough for a fresh CI machine's disk.

PyPI's torch for Linux is the CUDA build: torch, Triton and the nvidia-*
wheels come to 5.5 GB installed, and pip keeps every downloaded wheel until
it has installed them all. tools/python-env.sh therefore installs the wheels
one at a time (the order this script's --list gives) and calls --prune after
each: it removes what a CPU-only run never loads and keeps every library
torch's own shared objects link, so `import torch` and every CPU op work.

    python tools/pyenv_prune.py --list big|small REPORT  # from `pip install --dry-run --report`
    python tools/pyenv_prune.py --prune                  # after each install
    python tools/pyenv_prune.py --check                  # torch loads, nothing it links is missing

Removed: Triton (torch imports it only for GPU kernels), the CUDA headers,
static libraries and device bitcode, and every CUDA shared library that no
torch library links (cuDNN's engine libraries, which libcudnn opens only on
a GPU; cuSOLVER and nvJitLink, which only libtorch_cuda_linalg links, a
library torch opens on the first CUDA linear-algebra call).
"""

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig

SITE = sysconfig.get_paths()["purelib"]
TORCH_LIB = os.path.join(SITE, "torch", "lib")
# opened by torch only when a CUDA linear-algebra op first runs
LAZY = {"libtorch_cuda_linalg.so"}
# the CUDA driver: part of a GPU machine, never of a wheel
DRIVER = {"libcuda.so.1"}
# installed one at a time (each is hundreds of MB); everything else at once
BIG = re.compile(r"^(torch|nvidia-.*)$")
SKIP = {"triton"}


def canonical(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def list_reqs(which, report_path):
    with open(report_path) as f:
        report = json.load(f)
    reqs = []
    for item in report.get("install", []):
        meta = item["metadata"]
        name = canonical(meta["name"])
        if name in SKIP:
            continue
        big = bool(BIG.match(name))
        if (which == "big") == big:
            reqs.append((name != "torch", name, f"{meta['name']}=={meta['version']}"))
    # torch first: its libraries name the CUDA libraries the prune keeps
    for _, _, req in sorted(reqs):
        print(req)


def torch_libs():
    if not os.path.isdir(TORCH_LIB):
        return []
    return [
        os.path.join(TORCH_LIB, n)
        for n in sorted(os.listdir(TORCH_LIB))
        if ".so" in n and n not in LAZY
    ]


def ldd(path):
    """(name, resolved path or None) for each library `path` loads."""
    out = subprocess.run(["ldd", path], capture_output=True, text=True).stdout
    deps = []
    for line in out.splitlines():
        m = re.match(r"\s*(\S+)\s+=>\s+(not found|\S+)", line)
        if m:
            deps.append((m.group(1), None if m.group(2) == "not found" else m.group(2)))
    return deps


def needed():
    names = set()
    for lib in torch_libs():
        for name, path in ldd(lib):
            names.add(os.path.basename(name))
            if path:
                names.add(os.path.basename(path))
                names.add(os.path.basename(os.path.realpath(path)))
    return names


def size(path):
    if os.path.islink(path) or os.path.isfile(path):
        return os.lstat(path).st_size
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            total += os.lstat(os.path.join(root, f)).st_size
    return total


def remove(path):
    freed = size(path)
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.remove(path)
    return freed


def prune():
    freed = 0
    for name in SKIP:
        path = os.path.join(SITE, name)
        if os.path.isdir(path):
            freed += remove(path)
    nvidia = os.path.join(SITE, "nvidia")
    if os.path.isdir(nvidia):
        keep = needed()
        for root, dirs, files in os.walk(nvidia):
            for d in list(dirs):
                if d == "include":
                    freed += remove(os.path.join(root, d))
                    dirs.remove(d)
            for f in files:
                path = os.path.join(root, f)
                if f.endswith((".a", ".bc")):
                    freed += remove(path)
                elif ".so" in f and os.path.basename(root) == "lib" and f not in keep:
                    freed += remove(path)
    print(f"pyenv_prune: removed {freed / 2**20:.0f} MiB torch never loads on a CPU")


def check():
    missing = sorted(
        {f"{os.path.basename(lib)}: {name}" for lib in torch_libs() for name, path in ldd(lib) if path is None and name not in DRIVER}
    )
    if missing:
        sys.exit(
            "pyenv_prune: torch's libraries miss "
            + ", ".join(missing)
            + " (run tools/python-env.sh with HCCL_RS_PYENV_FULL=1 for the unpruned install)"
        )
    code = "import torch; assert float(torch.ones(4).sum()) == 4.0; print(torch.__version__)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"pyenv_prune: `import torch` fails after the prune:\n{r.stderr[-2000:]}")
    print(f"pyenv_prune: torch {r.stdout.strip()} loads; every library it links is present")


def main(argv):
    if len(argv) == 3 and argv[0] == "--list" and argv[1] in ("big", "small"):
        list_reqs(argv[1], argv[2])
    elif argv == ["--prune"]:
        prune()
    elif argv == ["--check"]:
        check()
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
