#!/usr/bin/env bash
# Session 40's second GPU call (an H200: its 141 GB holds five processes of each workload): GPT-2, GPT-2 + ckpt and
# Llama + ckpt in every way in beside PyTorch's A/A, lockstep, --series off; with what is left of run55.sh's rounds.
. bench/gpu/call_prelude.sh
BUDGET=${BUDGET:-560}
bench/gpu/gpu_call.sh steps $B/lib/libfragfree.so g3 "$(left)" gpt2,gpt2+ckpt,llama+ckpt "torch,$N,$L,$P,torch#again"
bench/gpu/gpu_call.sh summary g3
