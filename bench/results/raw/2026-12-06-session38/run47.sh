#!/usr/bin/env bash
# Session 38's third GPU call: FSDP-style with the default (large_page_mb:32) and large_page_mb:64 beside PyTorch's
# A/A, lockstep, as many rounds as the session's last device minutes hold; the phase table with them.
. bench/gpu/call_prelude.sh
bench/gpu/gpu_call.sh steps $B/lib/libfragfree.so fsdp64 "$(left)" fsdp "torch,$N,$N+large_page_mb:64,torch#again"
bench/gpu/gpu_call.sh summary fsdp64
