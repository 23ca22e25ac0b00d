#!/usr/bin/env bash
# Session 38's fourth GPU call (at 3bd4a83, FSDP-style's first gather marked in three: empty0, repeat0, gather0):
# FSDP-style with the default beside PyTorch's A/A, lockstep, 150 s: which of the first gather's calls is longer.
. bench/gpu/call_prelude.sh
bench/gpu/gpu_call.sh steps $B/lib/libfragfree.so ph 150 fsdp "torch,$N,torch#again"
bench/gpu/gpu_call.sh summary ph | tail -6
