#!/usr/bin/env bash
# Session 30, GPU call 2 (main's build in .carry/gpu): the steady-state hot path on the cuda backend (one
# binary, pinned CPU 5), then step time for moe, gpt2, llama+ckpt, every way in, alternated rounds
# (lockstep where the GPU holds six processes' memory, else one process at a time).
set -u
OUT="${OUT:-$PWD/gpu-out}"; mkdir -p "$OUT"
B=.carry/gpu
export LD_LIBRARY_PATH="$PWD/$B/lib:$PWD/$B/deps:${LD_LIBRARY_PATH:-}"
T0=$SECONDS
{ nvidia-smi -L; lscpu; uname -r; cat /proc/loadavg; } > "$OUT/machine.txt" 2>&1
nvidia-smi -L; cat /proc/loadavg
MEM=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
FRAGFREE_BENCH_BACKEND=cuda timeout $(( ${HOT_S:-70} + 60 )) python3 bench/micro/hot_ab.py --rounds 30 \
  --budget-s "${HOT_S:-70}" --cpu 5 main=$B/bin/steady_state_bench > "$OUT/hot_cuda.log" 2>&1
echo "hot rc=$? at $((SECONDS - T0)) s"
left=$(( ${BUDGET:-560} - (SECONDS - T0) - 25 ))
if [ "$MEM" -gt 100000 ]; then
  args=(--lockstep --rounds 14 --warmup 10 --steps 10
        --modes 'torch,expandable,ff-native@time_calls:False,ff-preload@time_calls:False,ff-pluggable@time_calls:False,torch#again')
else
  args=(--rounds 14 --warmup 8 --steps 8
        --modes 'torch,ff-native@time_calls:False,ff-preload@time_calls:False,ff-pluggable@time_calls:False,torch#again')
fi
echo "GPU memory ${MEM} MiB; steps budget ${left} s: ${args[*]}"
timeout $(( left + 20 )) bench/gpu/step_suite.sh $B/lib/libfragfree.so steps -- "${args[@]}" --pin-cpus 2-7 \
  --timeout 120 --workloads moe,llama+ckpt,gpt2 --budget-s "$left" > "$OUT/steps.log" 2>&1
echo "steps rc=$? at $((SECONDS - T0)) s"
echo "=== hot path, cuda"; grep -v "^round" "$OUT/hot_cuda.log" | tail -6
echo "=== steps"; grep -c FAILED "$OUT/steps.log"; tail -45 "$OUT/steps.log"
