#!/usr/bin/env bash
# Prepared in session 34 for the next session's GPU calls (main's build in .carry/gpu): issue 19's whole step-time
# matrix, every workload every way in with PyTorch's A/A beside, at least 3 rounds a cell, in two calls of ~9 min.
#   BUDGET=S run35.sh 1   FSDP-style and GPT-2 + ckpt, then Llama + ckpt: five processes each (they fit 80 GB)
#   BUDGET=S run35.sh 2   MoE-style and GPT-2: five processes on a card of 120 GB or more; on an 80 GB card
#                         native and pluggable with the A/A, then LD_PRELOAD with the A/A (four processes at most)
# A round of the first group takes ~45 s on an H100, Llama + ckpt's ~27 s, MoE-style and GPT-2's ~51 s with four
# modes (bench/results/2026-12-06-h100-session34.md).
. bench/gpu/call_prelude.sh
case "${1:-}" in
  1)
    bench/gpu/gpu_call.sh steps $B/lib/libfragfree.so fsdp_ckpt 200 fsdp,gpt2+ckpt "torch,$N,$L,$P,torch#again"
    bench/gpu/gpu_call.sh steps $B/lib/libfragfree.so llama "$(left)" llama+ckpt "torch,$N,$L,$P,torch#again"
    bench/gpu/gpu_call.sh summary fsdp_ckpt llama
    ;;
  2)
    mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
    if [ "${mib:-0}" -ge 120000 ]; then
      bench/gpu/gpu_call.sh steps $B/lib/libfragfree.so moe_gpt2 "$(left)" moe,gpt2 "torch,$N,$L,$P,torch#again"
      bench/gpu/gpu_call.sh summary moe_gpt2
    else
      bench/gpu/gpu_call.sh steps $B/lib/libfragfree.so moe_gpt2 250 moe,gpt2 "torch,$N,$P,torch#again"
      bench/gpu/gpu_call.sh steps $B/lib/libfragfree.so moe_gpt2_preload "$(left)" moe,gpt2 "torch,$L,torch#again"
      bench/gpu/gpu_call.sh summary moe_gpt2 moe_gpt2_preload
    fi
    ;;
  *) echo "usage: BUDGET=S $0 1|2" >&2; exit 2 ;;
esac
