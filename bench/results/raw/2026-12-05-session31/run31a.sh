#!/usr/bin/env bash
# Session 31, GPU call 1 (main 483e51a's build in .carry/gpu, move_time_budget default 0):
# (1) steady-state hot path, CUDA backend, pinned CPU 5, cuda and host backends alternated;
# (2) the mapping path on its own; (3) step time, lockstep, FSDP and GPT-2+ckpt, every way in,
# default config, with a second PyTorch process (A/A) and expandable segments when the card has room.
set -u
OUT="${OUT:-$PWD/gpu-out}"; mkdir -p "$OUT"
B=.carry/gpu
export LD_LIBRARY_PATH="$PWD/$B/lib:$PWD/$B/deps:${LD_LIBRARY_PATH:-}"
T0=$SECONDS
{ nvidia-smi -L; nvidia-smi --query-gpu=name,memory.total --format=csv; lscpu; uname -r; cat /proc/loadavg; nproc; } \
  > "$OUT/machine.txt" 2>&1
nvidia-smi -L; grep -E "Model name|^CPU\(s\)" "$OUT/machine.txt"; cat /proc/loadavg
mkdir -p /tmp/wrap
for k in cuda host; do
  printf '#!/bin/sh\nFRAGFREE_BENCH_BACKEND=%s exec %s "$@"\n' "$k" "$PWD/$B/bin/steady_state_bench" > /tmp/wrap/$k
  chmod +x /tmp/wrap/$k
done
timeout $(( ${HOT_S:-110} + 90 )) python3 bench/micro/hot_ab.py --rounds 30 --budget-s "${HOT_S:-110}" --cpu 5 \
  cuda=/tmp/wrap/cuda host=/tmp/wrap/host > "$OUT/hot_backends.log" 2>&1
echo "hot rc=$? at $((SECONDS - T0)) s"; cat /proc/loadavg
FRAGFREE_BENCH_BACKEND=cuda taskset -c 5 timeout 60 $B/bin/steady_state_bench --benchmark_filter='MapPages|CreateRelease' \
  --benchmark_min_time=0.2 > "$OUT/map_path.log" 2>&1; echo "map_path rc=$?"
left=$(( ${BUDGET:-565} - (SECONDS - T0) - 25 ))
echo "steps budget ${left} s"
timeout $(( left + 20 )) bench/gpu/step_suite.sh $B/lib/libfragfree.so steps -- --lockstep --rounds 30 --warmup 12 \
  --steps 8 --pin-cpus 2-7 --timeout 90 --workloads fsdp,gpt2+ckpt \
  --modes 'torch,ff-native@time_calls:False,ff-preload@time_calls:False,ff-pluggable@time_calls:False,torch#again' \
  --budget-s "$left" > "$OUT/steps.log" 2>&1
echo "steps rc=$? at $((SECONDS - T0)) s"
echo "=== hot path by backend"; grep -v "^round" "$OUT/hot_backends.log" | tail -12
echo "=== map path"; grep -E "^BM_" "$OUT/map_path.log" | cut -c1-150
echo "=== steps: $(grep -c FAILED "$OUT/steps.log") failed"
sed -n '/^| workload | mode | step ms/,/^$/p' "$OUT/steps.log" | cut -d'|' -f2-8,10-12
sed -n '/^| workload | mode | median \[95% CI\]/,/^$/p' "$OUT/steps.log" | cut -d'|' -f2-3,8-9
