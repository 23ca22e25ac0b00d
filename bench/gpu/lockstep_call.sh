#!/usr/bin/env bash
# Step time in lockstep for a GPU call script (bench/results/raw/*/run*.sh), with the
# arguments those calls share, so that each script names only what it measures:
#   lockstep_call.sh run LIB NAME SECONDS WORKLOADS MODES
#       step_suite.sh LIB steps in lockstep: warm-up 8 steps, 8 timed steps a run,
#       CPUs 2-7, up to 14 rounds, as many as fit in SECONDS (none under 60 s);
#       the log in $OUT/NAME/steps.log, the archive in $OUT/NAME/step_results.tgz
#   lockstep_call.sh summary NAME...
#       each NAME's tables, shortened to fit a call's printed tail
# Run from the repository root. $OUT defaults to ./gpu-out, as step_suite.sh's.
set -u
OUT0="${OUT:-$PWD/gpu-out}"
case "${1:-}" in
  run)
    [ $# -eq 6 ] || { echo "usage: $0 run LIB NAME SECONDS WORKLOADS MODES" >&2; exit 2; }
    lib=$2 name=$3 secs=$4 workloads=$5 modes=$6
    if [ "$secs" -lt 60 ]; then echo "steps $name: skipped, $secs s left"; exit 0; fi
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
    done
    ;;
  *)
    echo "usage: $0 run LIB NAME SECONDS WORKLOADS MODES | summary NAME..." >&2
    exit 2
    ;;
esac
