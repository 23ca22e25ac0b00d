#!/usr/bin/env bash
# Session 37's GPU call with large_page_mb (Note [Large pages]): gpu_dropin.py in native and LD_PRELOAD mode with
# large_page_mb:8 (PyTorch's behaviour check by check on the real driver path of two page sizes, IPC included), then
# FSDP-style with fragfree's defaults, large_page_mb:8 and large_page_mb:32 beside PyTorch's A/A: whether its 64 MiB
# gathers in 8 or 32 MiB pages take back the CPU time the copies cost on 2 MiB pages, at the defaults' memory.
. bench/gpu/call_prelude.sh
# (The call ran the same two runs written out, their files named dropin_MODE_8.json.)
FRAGFREE_CONF=large_page_mb:8 OUT="$OUT0" bench/gpu/dropin_modes.sh $B/lib/libfragfree.so native preload
bench/gpu/gpu_call.sh steps $B/lib/libfragfree.so fsdp_large "$(left)" fsdp \
  "torch,$N,$N+large_page_mb:8,$N+large_page_mb:32,torch#again"
bench/gpu/gpu_call.sh summary fsdp_large
