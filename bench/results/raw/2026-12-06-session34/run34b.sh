#!/usr/bin/env bash
# Session 34, second GPU call (main's build in .carry/gpu): the steady-state hot path on the CUDA and host backends
# alternated, then lockstep step time with PyTorch's A/A beside: Llama + ckpt every way in; MoE every way in (on a
# card under 120 GB without native: call 1 has it, and five MoE processes outgrow 80 GB).
#   BUDGET=S run34b.sh
. bench/gpu/call_prelude.sh
timeout 100 python3 bench/micro/hot_ab.py --rounds 30 \
  --budget-s 50 --cpu 5 --backends cuda,host main=$B/bin/steady_state_bench > "$OUT0/hot_backends.log" 2>&1
echo "hot rc=$? at $((SECONDS - T0)) s"
bench/gpu/gpu_call.sh steps $B/lib/libfragfree.so c 200 llama+ckpt "torch,$N,$L,$P,torch#again"
mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
moe="torch,$L,$P,torch#again"; [ "${mib:-0}" -ge 120000 ] && moe="torch,$N,$L,$P,torch#again"
bench/gpu/gpu_call.sh steps $B/lib/libfragfree.so d "$(left)" moe "$moe"
echo "=== hot path by backend"; grep -v "^round" "$OUT0/hot_backends.log" | tail -8
bench/gpu/gpu_call.sh summary c d
