#!/usr/bin/env bash
# Session 32, call 1: BM_HandoffStep on the CUDA backend (FSDP-style's allocator calls of one step with their
# CUDA events, ns a call by kind), then session 31's prepared call (run31d.sh). Carry [".carry/gpu", ".carry/perf"].
#   BUDGET=S [MATRIX_S=S] run32a.sh
set -u
OUT0="${OUT:-$PWD/gpu-out}"; mkdir -p "$OUT0"
export LD_LIBRARY_PATH="$PWD/.carry/gpu/lib:$PWD/.carry/gpu/deps:${LD_LIBRARY_PATH:-}"
for backend in cuda host; do
  FRAGFREE_BENCH_BACKEND=$backend timeout 40 taskset -c 5 .carry/gpu/bin/steady_state_bench \
    --benchmark_filter=Handoff --benchmark_min_time=1 --benchmark_repetitions=3 > "$OUT0/handoff_$backend.log" 2>&1
  echo "handoff $backend rc=$?"
done
bash bench/results/raw/2026-12-05-session31/run31d.sh
echo "=== handoff (ns a call)"; grep -hE "^BM_Handoff" "$OUT0"/handoff_*.log | sed -E 's/ +/ /g' | cut -c1-230
