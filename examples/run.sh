#!/usr/bin/env bash
# Builds the C, C++ and Python examples against an installed tree (see
# tools/install.sh) with gcc/g++ -Wall -Werror, and runs each, checked:
#   C threads as ranks (shared and static libhccl, linked as -lascendcl from
#   PREFIX/lib and as -lhccl -lhcomm -lascendcl from PREFIX/lib64),
#   ACL graphs (captured HCCL calls replayed) with threads as ranks,
#   ACL profiling around an AllReduce loop (linked -lmsprofiler, traces checked),
#   C++ HcclCommInitAll, C++11 with issue 18's surface (version-11 config,
#   FP8 AllGather, symmetric windows, HcclBatchGet, suspend/resume, ACL
#   profiling) as threads and under `mpirun -np 4` (if mpicxx is present),
#   C under `mpirun -np 4` (if mpicc is present; the
#   ACL-graph example and symmetric windows with registered memory too),
#   Python ctypes across 4 processes.
# Usage: bash examples/run.sh PREFIX
set -euo pipefail
PREFIX=$(realpath "${1:?usage: examples/run.sh PREFIX}")
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
cflags=$(pkg-config --cflags hccl)
libs=$(pkg-config --libs hccl)
strict=(-Wall -Wextra -Werror)
run() { echo "+ $*"; timeout 180 "$@"; }

echo "== C: threads as ranks (HcclCommInitRootInfo per thread)"
gcc "${strict[@]}" -std=c11 $cflags "$here/c/allreduce_threads.c" $libs -lpthread -o "$out/threads"
run "$out/threads" 4 100000
run "$out/threads" 3 7

echo "== C: the same, linked as a program written for Ascend links it (-lascendcl -lhccl)"
gcc "${strict[@]}" $cflags "$here/c/allreduce_threads.c" -L"$PREFIX/lib" -Wl,-rpath,"$PREFIX/lib" \
  -lascendcl -lhccl -lpthread -o "$out/threads_acl"
run "$out/threads_acl" 2 1000

echo "== C: linked as an HCCL program's Makefile links it (-L\${ASCEND_HOME}/lib64 -lhccl -lhcomm -lascendcl)"
gcc "${strict[@]}" $cflags "$here/c/allreduce_threads.c" -L"$PREFIX/lib64" -Wl,-rpath,"$PREFIX/lib64" \
  -lhccl -lhcomm -lascendcl -lpthread -o "$out/threads_lib64"
run "$out/threads_lib64" 3 1000

echo "== C: static libhccl.a"
gcc "${strict[@]}" $cflags "$here/c/allreduce_threads.c" "$PREFIX/lib/libhccl.a" \
  $(pkg-config --libs-only-l --static hccl | sed 's/-lhccl//') -o "$out/threads_static"
run "$out/threads_static" 4 1000

echo "== C: ACL graphs, threads as ranks (captured calls executed 100 times, checked)"
gcc "${strict[@]}" -std=c11 $cflags "$here/c/graph_capture.c" $libs -lpthread -o "$out/graph"
run "$out/graph" 4 1000 100
run "$out/graph" 3 70000 20

echo "== C: ACL profiling around an AllReduce loop, threads as ranks (-lmsprofiler; traces checked)"
gcc "${strict[@]}" -std=c11 $cflags "$here/c/prof_allreduce.c" $libs -lmsprofiler -lpthread -o "$out/prof"
run "$out/prof" "$out/prof_traces" 4 1000 20
run "$out/prof" "$out/prof_traces_large" 2 300000 3

echo "== C++: HcclCommInitAll"
g++ "${strict[@]}" -std=c++17 $cflags "$here/cpp/allreduce.cpp" $libs -pthread -o "$out/cpp"
run "$out/cpp" 4 100000

echo "== C++11: version-11 config, FP8 AllGather, symmetric windows, HcclBatchGet, suspend/resume, ACL profiling; threads as ranks (-lhccl -lhcomm -lacl_rt -lmsprofiler from lib64)"
api18_libs=(-L"$PREFIX/lib64" -Wl,-rpath,"$PREFIX/lib64" -lhccl -lhcomm -lacl_rt -lmsprofiler)
g++ "${strict[@]}" -std=c++11 $cflags "$here/cpp/api18.cpp" "${api18_libs[@]}" -pthread -o "$out/api18"
# the example provokes refusals on purpose (FP8 reductions, an oversized window, a suspended communicator)
HCCL_RS_LOG=error run "$out/api18" threads 4 "$out/api18_prof_threads"
HCCL_RS_LOG=error run "$out/api18" threads 3 "$out/api18_prof_threads3"

if command -v mpicxx >/dev/null 2>&1; then
  echo "== C++11: the same, one rank per process under mpirun -np 4"
  mpicxx "${strict[@]}" -std=c++11 -DAPI18_MPI $cflags "$here/cpp/api18.cpp" "${api18_libs[@]}" -pthread -o "$out/api18_mpi"
  HCCL_RS_LOG=error run mpirun --allow-run-as-root --oversubscribe -np 4 "$out/api18_mpi" mpi "$out/api18_prof_mpi"
fi

if command -v mpicc >/dev/null 2>&1; then
  echo "== C: one rank per process under mpirun -np 4"
  mpicc "${strict[@]}" $cflags "$here/c/allreduce_mpi.c" $libs -o "$out/mpi"
  # root in CI containers; 2 cores for 4 ranks
  run mpirun --allow-run-as-root --oversubscribe -np 4 "$out/mpi" 100000
  echo "== C: ACL graphs, one rank per process under mpirun -np 4 and -np 2"
  mpicc "${strict[@]}" $cflags "$here/c/graph_capture_mpi.c" $libs -o "$out/graph_mpi"
  run mpirun --allow-run-as-root --oversubscribe -np 4 "$out/graph_mpi" 4096 100
  run mpirun --allow-run-as-root --oversubscribe -np 2 "$out/graph_mpi" 70000 50
  echo "== C: symmetric windows and registered memory under mpirun -np 4"
  mpicc "${strict[@]}" $cflags "$here/c/sym_window_mpi.c" $libs -o "$out/sym_window"
  run mpirun --allow-run-as-root --oversubscribe -np 4 "$out/sym_window" 100000
else
  echo "== (mpicc not found: skipping the mpirun example; apt-get install openmpi-bin libopenmpi-dev)"
fi

echo "== Python: ctypes, 4 processes"
run python3 "$here/python/allreduce.py" --lib "$PREFIX/lib/libhccl.so" --ranks 4 --count 100000
echo "== all examples passed"
