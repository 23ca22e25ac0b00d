#!/usr/bin/env bash
# Session 38's first GPU call: the default (large_page_mb:32) in every way in on FSDP-style, GPT-2 + ckpt and Llama +
# ckpt, with large_page_mb:64 native and PyTorch's A/A beside, lockstep; FSDP-style's phases (bench/gpu/workloads.py's
# marks) show which part of its step each mode lengthens. On an H200 first: the steady-state hot path and the mapping
# path.
. bench/gpu/call_prelude.sh
if nvidia-smi -L | grep -q H200; then
  python3 bench/micro/hot_ab.py --rounds 30 --budget-s 45 --cpu 5 --backends cuda,host \
    main=$B/bin/steady_state_bench > "$OUT0/hot_ab.log" 2>&1
  echo "hot_ab rc=$? at $((SECONDS - T0)) s"; tail -8 "$OUT0/hot_ab.log"
  timeout 60 env FRAGFREE_BENCH_BACKEND=cuda $B/bin/steady_state_bench --benchmark_min_time=0.2 \
    --benchmark_filter='MapPages|CreateRelease' > "$OUT0/mapping.log" 2>&1
  grep -E "^BM_" "$OUT0/mapping.log" | sed -E 's/ +/ /g'
fi
bench/gpu/gpu_call.sh steps $B/lib/libfragfree.so all3 "$(left)" fsdp,gpt2+ckpt,llama+ckpt \
  "torch,$N,$L,$P,$N+large_page_mb:64,torch#again"
bench/gpu/gpu_call.sh summary all3
