#!/usr/bin/env bash
# Where a workload's CPU time goes, mode against mode: for each MODE, one
# process runs the workload's steady-state steps (bench/gpu/profile_steps.py,
# blocking sync: waits for the GPU take no samples) while `perf record -p`
# samples it for SECONDS, flat (no call graph: reports take seconds); then the
# process times its kernels (KERNELS line). Per mode, packed into
# $OUT/profile_WORKLOAD.tgz (only a few files come back from $OUT): the
# process's log, on-CPU samples by library (MODE.dso.txt) and by library and
# function (MODE.self.txt); a mode run twice keeps both (MODE-2.*). A short
# summary prints last, ending with the CUDA calls the process made in its
# last profiled steps (profile_steps.py's API line), mode beside mode
# (bench/gpu/api_calls_table.py: which call a mode's extra libcuda time is in).
#   cpu_profile.sh LIB WORKLOAD SECONDS MODE...   (MODE: torch | ff-native | ff-pluggable | ff-preload)
# perf comes from .carry/perf (scripts/make_perf_bundle.sh) unless $PERF_BIN; the
# processes run on CPUs $PROFILE_CPUS (default 2-7, as step_suite.sh's runs).
set -u
LIB="$(readlink -f "$1")"; W=$2; S=$3; shift 3
RESULTS="${OUT:-$PWD/gpu-out}"; mkdir -p "$RESULTS"
OUT0="$(mktemp -d /tmp/fragfree-profile-$W.XXXXXX)"
P="$PWD/.carry/perf"
PERF() { if [ -n "${PERF_BIN:-}" ]; then "$PERF_BIN" "$@"; else LD_LIBRARY_PATH="$P/lib" "$P/perf" "$@"; fi; }
LD_LIBRARY_PATH="$(dirname "$LIB"):$(dirname "$(dirname "$LIB")")/deps:${LD_LIBRARY_PATH:-}"
export LD_LIBRARY_PATH
export FRAGFREE_LIBRARY="$LIB" TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-/tmp/fragfree_torch_ext}"
HERE="$(dirname "$0")"
for m in "$@"; do
  n=$m; k=2; while [ -e "$OUT0/$n.log" ]; do n=$m-$k; k=$((k + 1)); done
  flag="$(mktemp -u /tmp/fragfree-profile.XXXXXX)"
  pre=""; [ "$m" = ff-preload ] && pre="$LIB"
  LD_PRELOAD="$pre" taskset -c "${PROFILE_CPUS:-2-7}" python3 "$HERE/profile_steps.py" "$m" "$W" "$flag" --seconds $((S + 2)) \
    --kernel-steps "${KERNEL_STEPS:-5}" > "$OUT0/$n.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 240); do [ -e "$flag" ] && break; kill -0 $pid 2>/dev/null || break; sleep 0.5; done
  sleep 1
  PERF record -F 2999 -p $pid -o "$OUT0/$n.data" -- sleep "$S" > "$OUT0/$n.record.log" 2>&1
  wait $pid
  rm -f "$flag"
  PERF report -i "$OUT0/$n.data" --no-children --sort dso --stdio -g none 2>/dev/null | grep -v "^#" | grep -v "^$" |
    head -15 > "$OUT0/$n.dso.txt"
  PERF report -i "$OUT0/$n.data" --no-children --sort dso,sym --stdio -g none --percent-limit 0.3 2>/dev/null |
    grep -v "^#" | grep -v "^$" | head -70 > "$OUT0/$n.self.txt"
  rm -f "$OUT0/$n.data"
done
tar czf "$RESULTS/profile_$W.tgz" -C "$OUT0" .
grep -h "^PROFILED" "$OUT0"/*.log
for f in "$OUT0"/*.dso.txt; do echo "--- $(basename "$f")"; head -8 "$f" | cut -c1-80; done
grep -h "^KERNELS" "$OUT0"/*.log | cut -c1-400
python3 "$HERE/api_calls_table.py" "$OUT0"/*.log
rm -rf "$OUT0"
