#!/usr/bin/env bash
# Session 36's last GPU call: the CUDA calls' CPU time a step (bench/gpu/profile_steps.py's API line) for
# FSDP-style under PyTorch's default and fragfree native with 2, 8 and 20 MiB pages, each twice, alternated:
# whether cudaMemcpyAsync's extra time on fragfree's memory falls with the handles a copy spans.
. bench/gpu/call_prelude.sh
export PYTHONPATH="$PWD/integrations/python${PYTHONPATH:+:$PYTHONPATH}" FRAGFREE_LIBRARY="$PWD/$B/lib/libfragfree.so"
. bench/gpu/api_profile_modes.sh
api_profile_modes fsdp 2 torch ff-native ff-pages8=page_size_mb:8 ff-pages20=page_size_mb:20
