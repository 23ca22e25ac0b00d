#!/usr/bin/env bash
# Session 41's third GPU call (an H100: its 80 GB holds four GPT-2 processes, not five, so no A/A here): the hot
# path and the mapping path on this host, then GPT-2 in every way in beside PyTorch's default, lockstep.
. bench/gpu/call_prelude.sh
BUDGET=${BUDGET:-540}
bench/gpu/gpu_call.sh hotpath $B/bin/steady_state_bench
bench/gpu/gpu_call.sh steps $B/lib/libfragfree.so g4 "$(left)" gpt2 "torch,$N,$L,$P"
bench/gpu/gpu_call.sh summary g4
