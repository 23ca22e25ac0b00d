#!/usr/bin/env bash
# Session 38's first GPU call: the default (large_page_mb:32) in every way in on FSDP-style, GPT-2 + ckpt and Llama +
# ckpt, with large_page_mb:64 native and PyTorch's A/A beside, lockstep; FSDP-style's phases (bench/gpu/workloads.py's
# marks) show which part of its step each mode lengthens. On an H200 first: the steady-state hot path and the mapping
# path.
. bench/gpu/call_prelude.sh
nvidia-smi -L | grep -q H200 && bench/gpu/gpu_call.sh hotpath $B/bin/steady_state_bench
bench/gpu/gpu_call.sh steps $B/lib/libfragfree.so all3 "$(left)" fsdp,gpt2+ckpt,llama+ckpt \
  "torch,$N,$L,$P,$N+large_page_mb:64,torch#again"
bench/gpu/gpu_call.sh summary all3
