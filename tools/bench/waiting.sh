#!/usr/bin/env bash
# Measures the waiting policy where ranks outnumber cores: for each
# (HCCL_RS_SPIN_US, HCCL_RS_YIELDS) pair, hccl-test's average, p50, p99 and
# max per-op time (µs) for AllReduce and Broadcast at 8 B and 1 MiB, ranks
# as processes, REPS interleaved runs each (so a noisy minute hits every
# setting alike). The smallest figure per column is the one to pick.
#
#   bash tools/bench/waiting.sh
#   PS="4 8" SPINS="0 20" YIELDS="0 8 64 512" REPS=3 bash tools/bench/waiting.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

PS=${PS:-"4 8"}
OPS=${OPS:-"all_reduce broadcast"}
SIZES=${SIZES:-"8 1048576"}
SPINS=${SPINS:-"0 20"}
YIELDS=${YIELDS:-"0 8 64 512"}
REPS=${REPS:-3}

cargo build --release -q -p hccl-tools
HCCL=target/release/hccl-test
echo "machine: $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ)"
printf "%-11s %2s %8s %5s %6s %9s %9s %9s %9s\n" op p bytes spin yields avg_us p50_us p99_us max_us
for p in $PS; do
  for op in $OPS; do
    for b in $SIZES; do
      n=2000; [ "$b" -gt 65536 ] && n=100
      declare -A acc=()
      for rep in $(seq "$REPS"); do
        for s in $SPINS; do
          for y in $YIELDS; do
            row=$(HCCL_RS_SPIN_US=$s HCCL_RS_YIELDS=$y $HCCL "$op" -p "$p" -b "$b" -e "$b" \
              -n "$n" -w 5 -c 0 --transport process | awk -F'|' 'NR==3')
            acc[$s,$y]="${acc[$s,$y]:-} $(echo "$row" | awk -F'|' '{gsub(/ /,""); print $2","$6","$7","$8}')"
          done
        done
      done
      for s in $SPINS; do
        for y in $YIELDS; do
          # median over the reps of each column
          echo "${acc[$s,$y]}" | tr ' ' '\n' | grep -v '^$' | awk -F, -v op="$op" -v p="$p" -v b="$b" -v s="$s" -v y="$y" '
            { a[NR]=$1; q[NR]=$2; r[NR]=$3; m[NR]=$4 }
            function med(x, n,   i, j, t) { for (i=1;i<=n;i++) for (j=i+1;j<=n;j++) if (x[j]<x[i]) { t=x[i]; x[i]=x[j]; x[j]=t }; return x[int((n+1)/2)] }
            END { printf "%-11s %2s %8s %5s %6s %9.2f %9.2f %9.2f %9.2f\n", op, p, b, s, y, med(a,NR), med(q,NR), med(r,NR), med(m,NR) }'
        done
      done
      unset acc
    done
  done
done
