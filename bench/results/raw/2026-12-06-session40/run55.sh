#!/usr/bin/env bash
# Session 40's first GPU call. On an H200: the hot path and the mapping path first, then session 39's checks of
# ff_get_stat (gpu_dropin.py in PyTorch's default, pluggable, native and LD_PRELOAD mode; the stats read from Python
# on the CUDA backend), then FSDP-style and MoE-style in every way in beside PyTorch's A/A, lockstep, --series off.
# On an H100 (no H200 came): the same checks, and the steps through the pluggable allocator only.
. bench/gpu/call_prelude.sh
BUDGET=${BUDGET:-540}
if nvidia-smi -L | grep -q H200; then
  bench/gpu/gpu_call.sh hotpath $B/bin/steady_state_bench
  modes="torch,$N,$L,$P,torch#again"
else
  modes="torch,$P,$N,torch#again"
fi
OUT="$OUT0" bench/gpu/dropin_modes.sh $B/lib/libfragfree.so default pluggable native preload | tail -45
for extra in "" "--live-per-free 20"; do
  FRAGFREE_LIBRARY="$PWD/$B/lib/libfragfree.so" PYTHONPATH="$PWD/integrations/python" FRAGFREE_CONF=backend:cuda \
    timeout 90 python3 bench/micro/stat_read.py $extra | tee -a "$OUT0/stat_read.md"
done
bench/gpu/gpu_call.sh steps $B/lib/libfragfree.so fm "$(left)" fsdp,moe "$modes"
bench/gpu/gpu_call.sh summary fm
