#!/usr/bin/env bash
# perf profile of one workload's steady-state steps in each mode (on-CPU samples, blocking sync).
#   profile.sh WORKLOAD SECONDS MODE...
# perf comes from .carry/perf (scripts/make_perf_bundle.sh).
set -u
W=$1; S=$2; shift 2
OUT0="${OUT:-$PWD/gpu-out}/profile_$W"; mkdir -p "$OUT0"
P="$PWD/.carry/perf"; PERF() { LD_LIBRARY_PATH="$P/lib" "$P/perf" "$@"; }
LIB="$PWD/.carry/gpu/lib/libfragfree.so"
export LD_LIBRARY_PATH="$PWD/.carry/gpu/lib:$PWD/.carry/gpu/deps:${LD_LIBRARY_PATH:-}"
export FRAGFREE_LIBRARY="$LIB" TORCH_EXTENSIONS_DIR=/tmp/fragfree_torch_ext
HERE="$(dirname "$0")"
for m in "$@"; do
  flag=/tmp/flag_$m; rm -f $flag
  pre=""; [ "$m" = ff-preload ] && pre="$LIB"
  LD_PRELOAD="$pre" taskset -c 2-7 python3 "$HERE/profile_steps.py" $m $W $flag --seconds $((S + 3)) \
    > "$OUT0/$m.log" 2>&1 &
  pid=$!
  for i in $(seq 1 240); do [ -e $flag ] && break; sleep 0.5; done
  sleep 1
  PERF record -F 1999 --call-graph dwarf,8192 -p $pid -o "$OUT0/$m.data" -- sleep $S > "$OUT0/$m.record.log" 2>&1
  wait $pid
  grep PROFILED "$OUT0/$m.log"
  PERF report -i "$OUT0/$m.data" --no-children --sort dso --stdio 2>/dev/null | grep -v "^#" | grep -v "^$" | head -15 \
    > "$OUT0/$m.dso.txt"
  PERF report -i "$OUT0/$m.data" --children --sort sym --stdio -g none --percent-limit 0.7 2>/dev/null \
    | grep -v "^$" | head -90 > "$OUT0/$m.children.txt"
  PERF report -i "$OUT0/$m.data" --no-children --sort dso,sym --stdio -g none --percent-limit 0.4 2>/dev/null \
    | grep -v "^$" | head -60 > "$OUT0/$m.self.txt"
  rm -f "$OUT0/$m.data"
done
