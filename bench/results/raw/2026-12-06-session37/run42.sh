#!/usr/bin/env bash
# Session 37's fourth GPU call: large_page_mb:32 once the two page sizes retire the large one when they trade memory
# (Note [Large pages]): FSDP-style and MoE-style step time and memory, fragfree's defaults and large_page_mb:32 beside
# PyTorch's A/A (call 3 showed MoE-style +15% memory before the retirement).
. bench/gpu/call_prelude.sh
bench/gpu/gpu_call.sh steps $B/lib/libfragfree.so large32r "$(left)" fsdp,moe \
  "torch,$N,$N+large_page_mb:32,torch#again"
bench/gpu/gpu_call.sh summary large32r
