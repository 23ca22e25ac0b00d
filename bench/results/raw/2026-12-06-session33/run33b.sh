#!/usr/bin/env bash
# Session 33, call 3 (main's build in .carry/gpu): step time in lockstep with PyTorch's A/A beside, the workloads
# call 1 ran without one: MoE-style and GPT-2 (native and pluggable: with preload too, five processes outgrow an
# 80 GB card), then Llama + ckpt every way in, with what is left.   BUDGET=S [A_S=S] run33b.sh
set -u
OUT0="${OUT:-$PWD/gpu-out}"; mkdir -p "$OUT0"
B=.carry/gpu
T0=$SECONDS
{ nvidia-smi -L; lscpu; cat /proc/loadavg; } > "$OUT0/machine.txt" 2>&1
grep -E "GPU 0|Model name|BogoMIPS|L3|load" "$OUT0/machine.txt"
steps() {  # NAME SECONDS WORKLOADS MODES
  [ "$2" -ge 60 ] || return 0
  mkdir -p "$OUT0/$1"
  OUT="$OUT0/$1" timeout $(( $2 + 20 )) bench/gpu/step_suite.sh $B/lib/libfragfree.so steps -- --lockstep \
    --rounds 14 --warmup 8 --steps 8 --pin-cpus 2-7 --timeout 120 --workloads "$3" --modes "$4" \
    --budget-s "$2" > "$OUT0/$1/steps.log" 2>&1
  echo "steps $1 rc=$? at $((SECONDS - T0)) s"
}
N=ff-native@time_calls:False; P=ff-pluggable@time_calls:False; L=ff-preload@time_calls:False
steps moe_gpt2 "${A_S:-300}" moe,gpt2 "torch,$N,$P,torch#again"
steps llama "$(( ${BUDGET:-540} - (SECONDS - T0) - 25 ))" llama+ckpt "torch,$N,$L,$P,torch#again"
for d in moe_gpt2 llama; do
  [ -f "$OUT0/$d/steps.log" ] || continue
  echo "=== steps $d: $(grep -c FAILED "$OUT0/$d/steps.log") failed"; grep -h "a round takes" "$OUT0/$d/steps.log"
  sed -n '/^| workload | mode | step ms/,/^$/p' "$OUT0/$d/steps.log" | cut -d'|' -f2-6
  sed -n '/^| workload | mode | median \[95% CI\]/,/^$/p' "$OUT0/$d/steps.log" | cut -d'|' -f2-3,7-8
done
