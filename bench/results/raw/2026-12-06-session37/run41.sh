#!/usr/bin/env bash
# Session 37's third GPU call: large_page_mb:32 (Note [Large pages]). First the CUDA calls' CPU time a step
# (profile_steps.py's API line) of FSDP-style under PyTorch's default, fragfree's defaults and large_page_mb:32, twice,
# alternated: whether cudaMemcpyAsync's extra time on fragfree's memory goes with its 64 MiB blocks in 32 MiB pages;
# then FSDP-style and MoE-style step time and memory, the same modes beside PyTorch's A/A, for the rest of the call.
. bench/gpu/call_prelude.sh
export PYTHONPATH="$PWD/integrations/python${PYTHONPATH:+:$PYTHONPATH}" FRAGFREE_LIBRARY="$PWD/$B/lib/libfragfree.so"
. bench/gpu/api_profile_modes.sh
api_profile_modes fsdp 2 torch ff-native ff-large32=large_page_mb:32
bench/gpu/gpu_call.sh steps $B/lib/libfragfree.so large32 "$(left)" fsdp,moe \
  "torch,$N,$N+large_page_mb:32,torch#again"
bench/gpu/gpu_call.sh summary large32
