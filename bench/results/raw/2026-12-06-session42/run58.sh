#!/usr/bin/env bash
# Written in session 41 and not run (no machine came for its last minutes): FSDP-style and MoE-style through LD_PRELOAD
# beside native, pluggable and PyTorch's default, lockstep (four MoE-style processes fit an H100's 80 GB; no A/A).
. bench/gpu/call_prelude.sh
BUDGET=${BUDGET:-270}
bench/gpu/gpu_call.sh steps $B/lib/libfragfree.so fm4 "$(left)" fsdp,moe "torch,$L,$N,$P"
bench/gpu/gpu_call.sh summary fm4
