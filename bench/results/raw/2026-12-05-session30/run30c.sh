#!/usr/bin/env bash
# Session 30, GPU call 3 (main's build in .carry/gpu), lockstep step time on one GPU:
# (1) llama+ckpt: torch, ff-native (default move_time_budget 0.02), every way in with move_time_budget:0, torch#again;
# (2) moe and gpt2: torch and every way in (four processes, to fit an 80 GB card).
set -u
OUT0="${OUT:-$PWD/gpu-out}"; mkdir -p "$OUT0"
B=.carry/gpu
T0=$SECONDS
nvidia-smi -L; cat /proc/loadavg
run() {  # NAME BUDGET_S WORKLOADS MODES
  local left=$2
  mkdir -p "$OUT0/$1"
  OUT="$OUT0/$1" timeout $(( left + 25 )) bench/gpu/step_suite.sh $B/lib/libfragfree.so steps -- --lockstep \
    --rounds 14 --warmup 10 --steps 10 --pin-cpus 2-7 --timeout 120 --workloads "$3" --modes "$4" --budget-s "$left" \
    > "$OUT0/$1/steps.log" 2>&1
  echo "$1 rc=$? at $((SECONDS - T0)) s"
}
run llama "${LLAMA_S:-230}" llama+ckpt \
  'torch,ff-native,ff-native@move_time_budget:0,ff-preload@move_time_budget:0,ff-pluggable@move_time_budget:0,torch#again'
left=$(( ${BUDGET:-560} - (SECONDS - T0) - 30 ))
run moe_gpt2 "$left" moe,gpt2 'torch,ff-native,ff-preload,ff-pluggable'
for d in llama moe_gpt2; do
  echo "=== $d: $(grep -c FAILED "$OUT0/$d/steps.log") failed"
  sed -n '/^| workload | mode | step ms/,/^$/p' "$OUT0/$d/steps.log" | cut -d'|' -f2-8,10-12
  sed -n '/^| workload | mode | median \[95% CI\]/,/^$/p' "$OUT0/$d/steps.log" | cut -d'|' -f2-3,8-9
done
