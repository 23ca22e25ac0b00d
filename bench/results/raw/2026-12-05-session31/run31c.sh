#!/usr/bin/env bash
# Session 31, GPU call 2 (main 483e51a's build in .carry/gpu, move_time_budget default 0):
# (1) handle_size.py: GEMM and copy on cudaMalloc memory, 2 MiB pages, 4/8/32 MiB handles, one handle
#     (is a kernel's fixed cost over 2 MiB mappings what FSDP-style's +0.3% is?);
# (2) FSDP-style lockstep with expandable segments beside (VMM with 20 MiB handles);
# (3) MoE and GPT-2, torch and every way in (four processes, to fit an 80 GB card).
set -u
OUT0="${OUT:-$PWD/gpu-out}"; mkdir -p "$OUT0"
B=.carry/gpu
T0=$SECONDS
nvidia-smi -L; grep -m1 -E "BogoMIPS" /proc/cpuinfo; grep -m1 "model name" /proc/cpuinfo; cat /proc/loadavg
(cd bench/gpu && timeout 80 python3 handle_size.py --handle-mib 4,8,32 --rounds 9 --iters 50) > "$OUT0/handle_size.log" 2>&1
echo "handle_size rc=$? at $((SECONDS - T0)) s"
run() {  # NAME BUDGET_S WORKLOADS MODES WARMUP STEPS
  local left=$2
  mkdir -p "$OUT0/$1"
  OUT="$OUT0/$1" timeout $(( left + 25 )) bench/gpu/step_suite.sh $B/lib/libfragfree.so steps -- --lockstep \
    --rounds 14 --warmup $5 --steps $6 --pin-cpus 2-7 --timeout 120 --workloads "$3" --modes "$4" --budget-s "$left" \
    > "$OUT0/$1/steps.log" 2>&1
  echo "$1 rc=$? at $((SECONDS - T0)) s"
}
run fsdp "${FSDP_S:-160}" fsdp \
  'torch,expandable,ff-native@time_calls:False,ff-pluggable@time_calls:False,torch#again' 12 8
left=$(( ${BUDGET:-565} - (SECONDS - T0) - 30 ))
run moe_gpt2 "$left" moe,gpt2 'torch,ff-native@time_calls:False,ff-preload@time_calls:False,ff-pluggable@time_calls:False' 10 10
echo "=== handle size"; grep "^|" "$OUT0/handle_size.log"
for d in fsdp moe_gpt2; do
  [ -f "$OUT0/$d/steps.log" ] || continue
  echo "=== $d: $(grep -c FAILED "$OUT0/$d/steps.log") failed"
  sed -n '/^| workload | mode | step ms/,/^$/p' "$OUT0/$d/steps.log" | cut -d'|' -f2-6
  sed -n '/^| workload | mode | median \[95% CI\]/,/^$/p' "$OUT0/$d/steps.log" | cut -d'|' -f2-3,8-9
  sed -n '/^| workload | mode | wait for the GPU/,/^$/p' "$OUT0/$d/steps.log"
done
