#!/usr/bin/env bash
# One GPU call for the hot path (issue 19's steady-state target; Note [Hot path]
# and Note [Lock] in docs/design.md): the machine's CPU, the lock's tests and
# its benchmark on the GPU host's cores (whether membarrier is granted there,
# and what a waiter's barrier costs), then the steady-state A/B of the builds
# given on the CUDA backend (bench/micro/hot_ab.py, alternated rounds, every
# run on one CPU), for at most BUDGET_S seconds. Logs under $OUT; the tables
# are printed last.
#
#   bench/gpu/hot_path_call.sh BUNDLE NAME=STEADY_STATE_BENCH ...
#
# BUNDLE: scripts/make_gpu_bundle.sh's output (mutex_test, mutex_bench and the
# libraries they need). Environment: OUT (default ./gpu-out), BUDGET_S (270),
# CPU (the CPU hot_ab.py pins to, 5), ROUNDS (40), FRAGFREE_BENCH_BACKEND (cuda;
# simulated to try the script on a host without a GPU).
set -u
B="${1:?usage: hot_path_call.sh BUNDLE NAME=BINARY ...}"
shift
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/$B/lib:$PWD/$B/deps:${LD_LIBRARY_PATH:-}"
{ nvidia-smi -L; lscpu; uname -r; } > "$OUT/machine.txt" 2>&1
grep -E "Model name|L2|L3|^CPU\(s\)" "$OUT/machine.txt"

s=$SECONDS
timeout 120 "$B/bin/mutex_test" > "$OUT/mutex_test.log" 2>&1
echo "mutex_test rc=$? $((SECONDS - s)) s: $(grep -E '^membarrier|^\[  (PASSED|FAILED)' "$OUT/mutex_test.log" | tr '\n' ' ')"
timeout 90 "$B/bin/mutex_bench" --benchmark_min_time=0.3 > "$OUT/mutex_bench.log" 2>&1
echo "mutex_bench rc=$?"

s=$SECONDS
FRAGFREE_BENCH_BACKEND="${FRAGFREE_BENCH_BACKEND:-cuda}" timeout $(( ${BUDGET_S:-270} + 150 )) python3 bench/micro/hot_ab.py \
  --rounds "${ROUNDS:-40}" --budget-s "${BUDGET_S:-270}" --cpu "${CPU:-5}" "$@" > "$OUT/hot_ab.log" 2>&1
echo "hot_ab rc=$? $((SECONDS - s)) s"

grep -E "^BM_" "$OUT/mutex_bench.log" | awk '{print $1, $2, $3, $NF}'
grep -v "^round" "$OUT/hot_ab.log" | tail -14
