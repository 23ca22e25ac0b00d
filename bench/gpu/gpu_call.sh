#!/usr/bin/env bash
# What the GPU call scripts (bench/results/raw/*/run*.sh) share, so that each
# names only what it measures:
#   gpu_call.sh machine
#       the GPU, the host CPU and its load into $OUT/machine.txt; prints the gist
#   gpu_call.sh steps LIB NAME SECONDS WORKLOADS MODES
#       step_suite.sh LIB steps in lockstep: warm-up 8 steps, 8 timed steps a run,
#       CPUs 2-7, up to 14 rounds, as many as fit in SECONDS (none under 60 s);
#       the log in $OUT/NAME/steps.log, the archive in $OUT/NAME/step_results.tgz
#   gpu_call.sh summary NAME...
#       each NAME's tables, shortened to fit a call's printed tail
#   gpu_call.sh hotpath BIN
#       steady_state_bench BIN on the CUDA backend: the hot path's A/B rounds
#       beside the host backend (bench/micro/hot_ab.py, 45 s) and the mapping
#       path on its own; logs in $OUT/hot_ab.log and $OUT/mapping.log
#   gpu_call.sh budget LIB NAME SECONDS WORKLOADS MODES
#       bench/gpu/budget.py: the smallest device memory each workload runs 8
#       steps in, under each mode (none under 60 s left); results in
#       $OUT/NAME/budget.jsonl, each search's log beside it; prints the table
#   gpu_call.sh pack
#       everything under $OUT into one archive, $OUT/call.tgz, and nothing
#       beside it (the device tool brings back at most 8 files from $OUT)
# Run from the repository root. $OUT defaults to ./gpu-out, as step_suite.sh's.
set -u
OUT0="${OUT:-$PWD/gpu-out}"
# Whether a measurement would start with under a minute of its call left
# (then it says so and is skipped): too_late WHAT NAME SECONDS.
too_late() {
  [ "$3" -lt 60 ] || return 1
  echo "$1 $2: skipped, $3 s left"
}
case "${1:-}" in
  machine)
    mkdir -p "$OUT0"
    { nvidia-smi -L; lscpu; cat /proc/loadavg; } > "$OUT0/machine.txt" 2>&1
    grep -E "GPU 0|Model name|BogoMIPS|L3|load" "$OUT0/machine.txt"
    ;;
  steps)
    [ $# -eq 6 ] || { echo "usage: $0 steps LIB NAME SECONDS WORKLOADS MODES" >&2; exit 2; }
    lib=$2 name=$3 secs=$4 workloads=$5 modes=$6
    too_late steps "$name" "$secs" && exit 0
    mkdir -p "$OUT0/$name"
    OUT="$OUT0/$name" timeout $((secs + 20)) "$(dirname "$0")/step_suite.sh" "$lib" steps -- --lockstep \
      --rounds 14 --warmup 8 --steps 8 --pin-cpus 2-7 --timeout 120 --workloads "$workloads" --modes "$modes" \
      --budget-s "$secs" > "$OUT0/$name/steps.log" 2>&1
    echo "steps $name rc=$?"
    ;;
  summary)
    shift
    for d in "$@"; do
      log="$OUT0/$d/steps.log"
      [ -f "$log" ] || continue
      echo "=== steps $d: $(grep -c FAILED "$log") failed"; grep -h "a round takes" "$log"
      sed -n '/^| workload | mode | step ms/,/^$/p' "$log" | cut -d'|' -f2-6
      sed -n '/^| workload | mode | median \[95% CI\]/,/^$/p' "$log" | cut -d'|' -f2-3,7-8
      sed -n '/^| workload | mode | pairs |/,/^$/p' "$log" | cut -d'|' -f3-
    done
    ;;
  budget)
    [ $# -eq 6 ] || { echo "usage: $0 budget LIB NAME SECONDS WORKLOADS MODES" >&2; exit 2; }
    lib=$2 name=$3 secs=$4 workloads=$5 modes=$6
    too_late budget "$name" "$secs" && exit 0
    mkdir -p "$OUT0/$name"
    timeout "$secs" python3 "$(dirname "$0")/budget.py" --lib "$lib" --out "$OUT0/$name" \
      --workloads "$workloads" --modes "$modes" > "$OUT0/$name/budget.log" 2>&1
    echo "budget $name rc=$?"
    if [ -f "$OUT0/$name/budget.jsonl" ]; then
      python3 "$(dirname "$0")/budget.py" --table "$OUT0/$name/budget.jsonl"
    fi
    ;;
  hotpath)
    [ $# -eq 2 ] || { echo "usage: $0 hotpath BIN" >&2; exit 2; }
    mkdir -p "$OUT0"
    python3 bench/micro/hot_ab.py --rounds 30 --budget-s 45 --cpu 5 --backends cuda,host \
      "main=$2" > "$OUT0/hot_ab.log" 2>&1
    echo "hot_ab rc=$?"; tail -8 "$OUT0/hot_ab.log"
    timeout 60 env FRAGFREE_BENCH_BACKEND=cuda "$2" --benchmark_min_time=0.2 \
      --benchmark_filter='MapPages|CreateRelease' > "$OUT0/mapping.log" 2>&1
    grep -E "^BM_" "$OUT0/mapping.log" | sed -E 's/ +/ /g'
    ;;
  pack)
    [ -d "$OUT0" ] || exit 0
    tmp=$(mktemp /tmp/gpu_call.XXXXXX)
    # The files are removed only once the archive holds them all.
    tar czf "$tmp" -C "$OUT0" . || { rm -f "$tmp"; exit 1; }
    find "$OUT0" -mindepth 1 -delete && mv "$tmp" "$OUT0/call.tgz"
    ;;
  *)
    echo "usage: $0 machine | steps LIB NAME SECONDS WORKLOADS MODES | summary NAME... |" \
      "budget LIB NAME SECONDS WORKLOADS MODES | hotpath BIN | pack" >&2
    exit 2
    ;;
esac
