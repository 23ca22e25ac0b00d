#!/usr/bin/env bash
# Session 35, third GPU call (main's build in .carry/gpu, perf in .carry/perf): where MoE-style's CPU time goes,
# PyTorch's default against fragfree native and LD_PRELOAD, alternated twice (blocking sync: waits take no samples);
# then the steady-state hot path on the CUDA and host backends alternated.
#   run35c.sh
. bench/gpu/call_prelude.sh
KERNEL_STEPS=3 bench/gpu/cpu_profile.sh $B/lib/libfragfree.so moe 8 torch ff-native ff-preload torch ff-native \
  > "$OUT0/profile_moe.log" 2>&1
echo "profile rc=$? at $((SECONDS - T0)) s"
timeout 100 python3 bench/micro/hot_ab.py --rounds 30 \
  --budget-s 45 --cpu 5 --backends cuda,host main=$B/bin/steady_state_bench > "$OUT0/hot_backends.log" 2>&1
echo "hot rc=$? at $((SECONDS - T0)) s"
cat "$OUT0/profile_moe.log" | cut -c1-200
echo "=== hot path by backend"; grep -v "^round" "$OUT0/hot_backends.log" | tail -8
