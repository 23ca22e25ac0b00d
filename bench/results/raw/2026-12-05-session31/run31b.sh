#!/usr/bin/env bash
# Session 31, GPU call 2 (main 483e51a's build in .carry/gpu, move_time_budget default 0):
# (0) perf profile of FSDP-style steady-state steps, torch / ff-native / ff-pluggable (profile.sh);
# (1) handle_size.py: GEMM and copy on cudaMalloc memory, 2 MiB pages, 4/8/32 MiB handles, one handle
#     (is a kernel's fixed cost over 2 MiB mappings what FSDP-style's +0.3% is?);
# (2) step time, lockstep, Llama+ckpt every way in with a PyTorch A/A;
# (3) MoE and GPT-2, torch and every way in (four processes, to fit an 80 GB card).
set -u
OUT0="${OUT:-$PWD/gpu-out}"; mkdir -p "$OUT0"
B=.carry/gpu
T0=$SECONDS
nvidia-smi -L; cat /proc/loadavg
timeout 170 bash bench/results/raw/2026-12-05-session31/profile.sh fsdp 3 torch ff-native ff-pluggable
echo "profile rc=$? at $((SECONDS - T0)) s"
(cd bench/gpu && timeout 100 python3 handle_size.py --handle-mib 4,8,32 --rounds 9 --iters 50) > "$OUT0/handle_size.log" 2>&1
echo "handle_size rc=$? at $((SECONDS - T0)) s"
(cd bench/gpu && timeout 60 python3 handle_size.py --n 8192 --m 512 --handle-mib 8,32 --rounds 7 --iters 20) \
  > "$OUT0/handle_size_8192.log" 2>&1
echo "handle_size 8192 rc=$? at $((SECONDS - T0)) s"
run() {  # NAME BUDGET_S WORKLOADS MODES
  local left=$2
  mkdir -p "$OUT0/$1"
  OUT="$OUT0/$1" timeout $(( left + 25 )) bench/gpu/step_suite.sh $B/lib/libfragfree.so steps -- --lockstep \
    --rounds 14 --warmup 10 --steps 10 --pin-cpus 2-7 --timeout 120 --workloads "$3" --modes "$4" --budget-s "$left" \
    > "$OUT0/$1/steps.log" 2>&1
  echo "$1 rc=$? at $((SECONDS - T0)) s"
}
[ "${LLAMA_S:-180}" -gt 0 ] && run llama "${LLAMA_S:-180}" llama+ckpt \
  'torch,ff-native@time_calls:False,ff-preload@time_calls:False,ff-pluggable@time_calls:False,torch#again'
left=$(( ${BUDGET:-565} - (SECONDS - T0) - 30 ))
run moe_gpt2 "$left" moe,gpt2 'torch,ff-native@time_calls:False,ff-preload@time_calls:False,ff-pluggable@time_calls:False'
for f in "$OUT0"/profile_fsdp/*.children.txt; do echo "=== $f"; grep -iE "fragfree|c10::cuda|CachingAllocator|cuEvent|cuStream|libcuda|THPVariable|at::native" "$f" | head -14; done
for f in "$OUT0"/profile_fsdp/*.dso.txt; do echo "=== $f"; head -6 "$f"; done
echo "=== handle size"; grep "^|" "$OUT0/handle_size.log"; grep "^|" "$OUT0/handle_size_8192.log"
for d in llama moe_gpt2; do
  [ -f "$OUT0/$d/steps.log" ] || continue
  echo "=== $d: $(grep -c FAILED "$OUT0/$d/steps.log") failed"
  sed -n '/^| workload | mode | step ms/,/^$/p' "$OUT0/$d/steps.log" | cut -d'|' -f2-6
  sed -n '/^| workload | mode | median \[95% CI\]/,/^$/p' "$OUT0/$d/steps.log" | cut -d'|' -f2-3,8-9
done
