#!/usr/bin/env bash
# Session 30, GPU call 1 (main's build in .carry/gpu): (1) the steady-state hot path of one binary on the
# cuda, simulated and host backends alternated, pinned to CPU 5, with the machine's load and steal around it;
# (2) step time, lockstep, FSDP/MoE/GPT-2+ckpt, every way in, default config (time_calls:False).
set -u
OUT="${OUT:-$PWD/gpu-out}"; mkdir -p "$OUT"
B=.carry/gpu
export LD_LIBRARY_PATH="$PWD/$B/lib:$PWD/$B/deps:${LD_LIBRARY_PATH:-}"
T0=$SECONDS
{ nvidia-smi -L; lscpu; uname -r; cat /proc/loadavg; which perf; nproc; } > "$OUT/machine.txt" 2>&1
grep -E "Model name|MHz|^CPU\(s\)" "$OUT/machine.txt"; cat /proc/loadavg
steal() { awk '/^cpu /{print "steal_jiffies="$9, "total="($2+$3+$4+$5+$6+$7+$8+$9)}' /proc/stat; }
steal > "$OUT/steal_before.txt"
mkdir -p /tmp/wrap
for k in cuda simulated host; do
  printf '#!/bin/sh\nFRAGFREE_BENCH_BACKEND=%s exec %s "$@"\n' "$k" "$PWD/$B/bin/steady_state_bench" > /tmp/wrap/$k
  chmod +x /tmp/wrap/$k
done
timeout $(( ${HOT_S:-170} + 100 )) python3 bench/micro/hot_ab.py --rounds 30 --budget-s "${HOT_S:-170}" --cpu 5 \
  cuda=/tmp/wrap/cuda simulated=/tmp/wrap/simulated host=/tmp/wrap/host > "$OUT/hot_backends.log" 2>&1
echo "hot_backends rc=$? at $((SECONDS - T0)) s"
steal > "$OUT/steal_after.txt"; cat /proc/loadavg
# One plain run on cuda, for the mapping path figures.
FRAGFREE_BENCH_BACKEND=cuda taskset -c 5 timeout 60 $B/bin/steady_state_bench --benchmark_filter='MapPages|CreateRelease' \
  --benchmark_min_time=0.2 > "$OUT/map_path.log" 2>&1; echo "map_path rc=$?"
left=$(( ${BUDGET:-565} - (SECONDS - T0) - 25 ))
echo "steps budget ${left} s"
timeout $(( left + 20 )) bench/gpu/step_suite.sh $B/lib/libfragfree.so steps -- --lockstep --rounds 14 --warmup 12 \
  --steps 8 --pin-cpus 2-7 --timeout 90 --workloads fsdp,moe,gpt2+ckpt \
  --modes 'torch,ff-native@time_calls:False,ff-preload@time_calls:False,ff-pluggable@time_calls:False,torch#again' --budget-s "$left" > "$OUT/steps.log" 2>&1
echo "steps rc=$? at $((SECONDS - T0)) s"
echo "=== hot path by backend"; grep -v "^round" "$OUT/hot_backends.log" | tail -16
echo "=== map path"; grep -E "^BM_" "$OUT/map_path.log" | cut -c1-150
echo "=== steps"; tail -40 "$OUT/steps.log"
