#!/usr/bin/env bash
# Session 42's third call, after the fix that waits for frees pending on other streams before an OOM: the FSDP-style
# budget again (call 2 found fragfree's 0.885-1.772 GiB against 0.770 for PyTorch and expandable segments, its OOM
# report showing 1.12 GiB "pending other streams"), gpu_dropin.py in every way in (with the new check
# record_stream_waited_for_before_oom), then the other workloads' budgets under fragfree native.
. bench/gpu/call_prelude.sh
BUDGET=${BUDGET:-540}
M="torch,expandable,$N,$N+large_page_mb:0"
bench/gpu/gpu_call.sh budget $B/lib/libfragfree.so bud3 100 fsdp "$M" | tail -6
OUT="$OUT0" bench/gpu/dropin_modes.sh $B/lib/libfragfree.so default pluggable native preload | tail -45
bench/gpu/gpu_call.sh budget $B/lib/libfragfree.so bud4 "$(left)" moe,gpt2,llama+ckpt "$N" | tail -6
