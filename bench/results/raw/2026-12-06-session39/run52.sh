#!/usr/bin/env bash
# Session 39's third GPU call: MoE-style and GPT-2 with the default native and pluggable, then LD_PRELOAD, beside
# PyTorch's A/A, lockstep, --series off (two sets: five processes of MoE-style do not fit 80 GB).
. bench/gpu/call_prelude.sh
BUDGET=560
bench/gpu/gpu_call.sh steps $B/lib/libfragfree.so np "$(( $(left) * 55 / 100 ))" moe,gpt2 "torch,$N,$P,torch#again"
bench/gpu/gpu_call.sh steps $B/lib/libfragfree.so pre "$(left)" moe,gpt2 "torch,$L,torch#again"
bench/gpu/gpu_call.sh summary np pre
