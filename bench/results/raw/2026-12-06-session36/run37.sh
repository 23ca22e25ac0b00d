#!/usr/bin/env bash
# Session 36's second GPU call: fragfree with larger pages (page_size_mb, Note [Page size and handle size]).
#   run37.sh dropin   gpu_dropin.py (PyTorch's behaviour checked check by check) in native and LD_PRELOAD mode with
#                     20 MiB pages: the real driver path of pages larger than the granularity, IPC included
#   BUDGET=S run37.sh fsdp   FSDP-style with fragfree's pages at 2 (default), 8 and 20 MiB beside PyTorch's A/A:
#                     whether fewer handles per copy take back the CPU time the copies cost on 2 MiB pages
#   BUDGET=S run37.sh moe    MoE-style and FSDP-style, fragfree at 2 and 8 MiB pages beside PyTorch's A/A
. bench/gpu/call_prelude.sh
export PYTHONPATH="$PWD/integrations/python${PYTHONPATH:+:$PYTHONPATH}" FRAGFREE_LIBRARY="$PWD/$B/lib/libfragfree.so"
case "${1:-}" in
  dropin)
    # (The call ran the same two runs written out, their files named dropin_MODE_20.json.)
    FRAGFREE_CONF=page_size_mb:20 OUT="$OUT0" bench/gpu/dropin_modes.sh $B/lib/libfragfree.so native preload
    ;;
  fsdp)
    bench/gpu/gpu_call.sh steps $B/lib/libfragfree.so fsdp_pages "$(left)" fsdp \
      "torch,$N,$N+page_size_mb:8,$N+page_size_mb:20,torch#again"
    bench/gpu/gpu_call.sh summary fsdp_pages
    ;;
  moe)
    bench/gpu/gpu_call.sh steps $B/lib/libfragfree.so moe_pages "$(left)" moe,fsdp \
      "torch,$N,$N+page_size_mb:8,torch#again"
    bench/gpu/gpu_call.sh summary moe_pages
    ;;
  *) echo "usage: [BUDGET=S] $0 dropin|fsdp|moe" >&2; exit 2 ;;
esac
