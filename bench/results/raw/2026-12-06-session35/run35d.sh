#!/usr/bin/env bash
# Session 35, last GPU call (main's build in .carry/gpu): MoE-style alone, as many lockstep rounds as BUDGET allows,
# every way in with PyTorch's A/A beside on a card of 120 GB or more; on an 80 GB card (four ~20 GiB processes at
# most) native and LD_PRELOAD with the A/A.
#   BUDGET=S run35d.sh
. bench/gpu/call_prelude.sh
mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
modes="torch,$N,$L,torch#again"; [ "${mib:-0}" -ge 120000 ] && modes="torch,$N,$L,$P,torch#again"
bench/gpu/gpu_call.sh steps $B/lib/libfragfree.so moe "$(left)" moe "$modes"
bench/gpu/gpu_call.sh summary moe
