#!/usr/bin/env bash
# Session 37's GPU call with large_page_mb (Note [Large pages]): gpu_dropin.py in native and LD_PRELOAD mode with
# large_page_mb:8 (PyTorch's behaviour check by check on the real driver path of two page sizes, IPC included), then
# FSDP-style with fragfree's defaults, large_page_mb:8 and large_page_mb:32 beside PyTorch's A/A: whether its 64 MiB
# gathers in 8 or 32 MiB pages take back the CPU time the copies cost on 2 MiB pages, at the defaults' memory.
. bench/gpu/call_prelude.sh
export PYTHONPATH="$PWD/integrations/python${PYTHONPATH:+:$PYTHONPATH}" FRAGFREE_LIBRARY="$PWD/$B/lib/libfragfree.so"
for lp in 8; do
  FRAGFREE_CONF=large_page_mb:$lp timeout 150 python3 integrations/python/tests/gpu_dropin.py --mode native \
    > "$OUT0/dropin_native_$lp.json" 2> "$OUT0/dropin_native_$lp.err"
  echo "dropin native large_page_mb:$lp rc=$? at $((SECONDS - T0)) s"
  FRAGFREE_CONF=large_page_mb:$lp LD_PRELOAD="$FRAGFREE_LIBRARY" timeout 150 python3 \
    integrations/python/tests/gpu_dropin.py --mode preload > "$OUT0/dropin_preload_$lp.json" \
    2> "$OUT0/dropin_preload_$lp.err"
  echo "dropin preload large_page_mb:$lp rc=$? at $((SECONDS - T0)) s"
done
python3 bench/gpu/dropin_summary.py "$OUT0"/dropin_*.json
bench/gpu/gpu_call.sh steps $B/lib/libfragfree.so fsdp_large "$(left)" fsdp \
  "torch,$N,$N+large_page_mb:8,$N+large_page_mb:32,torch#again"
bench/gpu/gpu_call.sh summary fsdp_large
