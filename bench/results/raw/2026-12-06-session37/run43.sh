#!/usr/bin/env bash
# Session 37's last GPU call: FSDP-style with fragfree's defaults, large_page_mb:32 and large_page_mb:64 (its 64 MiB
# gathers one handle each, as under cudaMalloc) beside PyTorch's A/A: whether the CPU part's last 0.05 ms a step with
# 32 MiB pages (call 4) is the copies' second handle.
. bench/gpu/call_prelude.sh
bench/gpu/gpu_call.sh steps $B/lib/libfragfree.so large64 "$(left)" fsdp \
  "torch,$N,$N+large_page_mb:32,$N+large_page_mb:64,torch#again"
bench/gpu/gpu_call.sh summary large64
