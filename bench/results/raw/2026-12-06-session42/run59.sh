#!/usr/bin/env bash
# The memory criterion's GPU measurement: the smallest device memory in which each workload runs 8
# steps (bench/gpu/budget.py: a driver ballast leaves only the budget free, a binary search to 1/16 GiB) under
# PyTorch's default, expandable segments and fragfree native, on any one GPU (the budget workloads first).
. bench/gpu/call_prelude.sh
BUDGET=${BUDGET:-540}
bench/gpu/gpu_call.sh budget $B/lib/libfragfree.so bud "$(left)" fsdp,moe,gpt2,llama+ckpt "torch,expandable,$N"
