#!/usr/bin/env bash
# Session 31, prepared GPU call (main's build in .carry/gpu; perf in .carry/perf), on FSDP-style's +0.3%:
# (1) handle_size.py: GEMM and copy on cudaMalloc memory, 2 MiB pages, 4/8/32 MiB handles, one handle;
# (2) perf profile of FSDP-style steady-state steps, torch and ff-native (profile.sh, now bench/gpu/cpu_profile.sh: flat, no call graph);
# (3) FSDP-style lockstep with expandable segments (VMM, 20 MiB handles) beside fragfree and a PyTorch A/A;
# then, with MATRIX_S / LLAMA_S seconds given, MoE and GPT-2 (four processes: an 80 GB card) and Llama + ckpt,
# every way in, with the move time budget's default 0.
#   BUDGET=S [FSDP_S=S] [MATRIX_S=S] [LLAMA_S=S] run31d.sh
set -u
OUT0="${OUT:-$PWD/gpu-out}"; mkdir -p "$OUT0"
B=.carry/gpu
T0=$SECONDS
nvidia-smi -L; grep -m1 -E "BogoMIPS" /proc/cpuinfo; grep -m1 "model name" /proc/cpuinfo; cat /proc/loadavg
(cd bench/gpu && timeout 70 python3 handle_size.py --handle-mib 4,8,32 --rounds 9 --iters 50) > "$OUT0/handle_size.log" 2>&1
echo "handle_size rc=$? at $((SECONDS - T0)) s"
[ -x .carry/perf/perf ] && { timeout 110 bash bench/gpu/cpu_profile.sh $B/lib/libfragfree.so fsdp 3 torch ff-native \
  > "$OUT0/profile.txt" 2>&1; echo "profile rc=$? at $((SECONDS - T0)) s"; }
run() {  # NAME BUDGET_S WORKLOADS MODES WARMUP STEPS
  [ "$2" -ge 60 ] || return 0
  mkdir -p "$OUT0/$1"
  OUT="$OUT0/$1" timeout $(( $2 + 25 )) bench/gpu/step_suite.sh $B/lib/libfragfree.so steps -- --lockstep \
    --rounds 14 --warmup $5 --steps $6 --pin-cpus 2-7 --timeout 120 --workloads "$3" --modes "$4" --budget-s "$2" \
    > "$OUT0/$1/steps.log" 2>&1
  echo "$1 rc=$? at $((SECONDS - T0)) s"
}
FF='ff-native@time_calls:False,ff-preload@time_calls:False,ff-pluggable@time_calls:False'
left=$(( ${BUDGET:-300} - (SECONDS - T0) - 20 - ${MATRIX_S:-0} - ${LLAMA_S:-0} ))
run fsdp "${FSDP_S:-$left}" fsdp "torch,expandable,ff-native@time_calls:False,ff-pluggable@time_calls:False,torch#again" 12 8
run moe_gpt2 "${MATRIX_S:-0}" moe,gpt2 "torch,$FF" 10 10
run llama "${LLAMA_S:-0}" llama+ckpt "torch,$FF,torch#again" 10 10
echo "=== handle size"; grep "^|" "$OUT0/handle_size.log"
[ -f "$OUT0/profile.txt" ] && { echo "=== profile"; cat "$OUT0/profile.txt"; }
for d in fsdp moe_gpt2 llama; do
  [ -f "$OUT0/$d/steps.log" ] || continue
  echo "=== $d: $(grep -c FAILED "$OUT0/$d/steps.log") failed"
  sed -n '/^| workload | mode | step ms/,/^$/p' "$OUT0/$d/steps.log" | cut -d'|' -f2-6
  sed -n '/^| workload | mode | median \[95% CI\]/,/^$/p' "$OUT0/$d/steps.log" | cut -d'|' -f2-3,8-9
  sed -n '/^| workload | mode | wait for the GPU/,/^$/p' "$OUT0/$d/steps.log"
done
