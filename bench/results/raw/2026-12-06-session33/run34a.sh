#!/usr/bin/env bash
# Prepared in session 33 for the next GPU call (main's build in .carry/gpu, perf in .carry/perf):
# (1) handle_size.py with the CPU's side of the copy (copy_cpu): whether cudaMemcpyAsync costs the CPU more per
#     handle spanned (FSDP-style's CPU part is ~0.35 ms longer in every way in, LD_PRELOAD included, where the
#     engine is off the per-call path: what the modes share is the memory's 2 MiB handles);
# (2) on an H200, the steady-state hot path, cuda and host backends alternated (hot_ab.py; at target on H100 hosts,
#     not yet measured on the H200 with this engine);
# (3) FSDP-style's flat CPU profile and kernel times, same shapes in every mode (cpu_profile.sh);
# (4) lockstep step time with PyTorch's A/A beside: FSDP-style and GPT-2 + ckpt every way in, then MoE and GPT-2
#     (every way in on a card of 120 GB or more, else native and pluggable: five processes outgrow 80 GB).
#   BUDGET=S [STEPS_A_S=S] run34a.sh
set -u
OUT0="${OUT:-$PWD/gpu-out}"; mkdir -p "$OUT0"
B=.carry/gpu
export LD_LIBRARY_PATH="$PWD/$B/lib:$PWD/$B/deps:${LD_LIBRARY_PATH:-}"
T0=$SECONDS
bench/gpu/gpu_call.sh machine
(cd bench/gpu && timeout 80 python3 handle_size.py --handle-mib 8,32 --rounds 9 --iters 50) > "$OUT0/handle_size.log" 2>&1
echo "handle_size rc=$? at $((SECONDS - T0)) s"
if nvidia-smi -L | grep -q H200; then
  timeout 100 python3 bench/micro/hot_ab.py --rounds 30 \
    --budget-s 45 --cpu 5 --backends cuda,host main=$B/bin/steady_state_bench > "$OUT0/hot_backends.log" 2>&1
  echo "hot rc=$? at $((SECONDS - T0)) s"
fi
[ -x .carry/perf/perf ] && { OUT="$OUT0" timeout 110 bash bench/gpu/cpu_profile.sh $B/lib/libfragfree.so fsdp 5 \
  torch ff-native ff-preload > "$OUT0/profile.txt" 2>&1; echo "profile rc=$? at $((SECONDS - T0)) s"; }
N=ff-native@time_calls:False; P=ff-pluggable@time_calls:False; L=ff-preload@time_calls:False
bench/gpu/gpu_call.sh steps $B/lib/libfragfree.so a "${STEPS_A_S:-160}" fsdp,gpt2+ckpt "torch,$N,$L,$P,torch#again"
mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
big=""; [ "${mib:-0}" -ge 120000 ] && big=",$L"
bench/gpu/gpu_call.sh steps $B/lib/libfragfree.so b "$(( ${BUDGET:-540} - (SECONDS - T0) - 25 ))" moe,gpt2 "torch,$N$big,$P,torch#again"
echo "=== handle size"; grep "^|" "$OUT0/handle_size.log"
[ -f "$OUT0/hot_backends.log" ] && { echo "=== hot path by backend"; grep -v "^round" "$OUT0/hot_backends.log" | tail -8; }
[ -f "$OUT0/profile.txt" ] && { echo "=== profile (blocking sync)"; cat "$OUT0/profile.txt"; }
bench/gpu/gpu_call.sh summary a b
