#!/usr/bin/env bash
# Prepared in session 39, not run (its device time was spent): the first GPU call for ff_get_stat (pluggable mode's
# memory_allocated() and its kind read one figure, no JSON, no driver call; the LD_PRELOAD pool queries too). On an
# H200 first: the hot path and the mapping path. Then gpu_dropin.py in PyTorch's default, pluggable, native and
# LD_PRELOAD mode (the memory_* checks); the stats read from Python on the CUDA backend (bench/micro/stat_read.py);
# and FSDP-style and MoE-style through the pluggable allocator beside PyTorch's A/A, lockstep, for what the one-figure
# read changes in pluggable's step (step_time.py reads memory_reserved() after every step in every mode).
. bench/gpu/call_prelude.sh
nvidia-smi -L | grep -q H200 && bench/gpu/gpu_call.sh hotpath $B/bin/steady_state_bench
OUT="$OUT0" bench/gpu/dropin_modes.sh $B/lib/libfragfree.so default pluggable native preload | tail -45
FRAGFREE_LIBRARY="$PWD/$B/lib/libfragfree.so" PYTHONPATH="$PWD/integrations/python" FRAGFREE_CONF=backend:cuda \
  timeout 90 python3 bench/micro/stat_read.py | tee "$OUT0/stat_read.md"
FRAGFREE_LIBRARY="$PWD/$B/lib/libfragfree.so" PYTHONPATH="$PWD/integrations/python" FRAGFREE_CONF=backend:cuda \
  timeout 60 python3 bench/micro/stat_read.py --live-per-free 20 | tee -a "$OUT0/stat_read.md"
bench/gpu/gpu_call.sh steps $B/lib/libfragfree.so plug "$(left)" fsdp,moe "torch,$P,$N,torch#again"
bench/gpu/gpu_call.sh summary plug
