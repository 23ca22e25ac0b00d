#!/usr/bin/env bash
# Session 39's last GPU call (the session's last 300 s of device time): GPT-2 and MoE-style through the pluggable
# allocator beside PyTorch's A/A, lockstep, --series off, 200 s.
. bench/gpu/call_prelude.sh
bench/gpu/gpu_call.sh steps $B/lib/libfragfree.so plug 200 gpt2,moe "torch,$P,torch#again"
bench/gpu/gpu_call.sh summary plug
