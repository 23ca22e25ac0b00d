#!/usr/bin/env bash
# Prepared in session 35 for the next session's GPU calls (main's build in .carry/gpu, perf in .carry/perf).
#   run36.sh profile   which CUDA call FSDP-style's and MoE-style's extra libcuda time is in: cpu_profile.sh with
#                      PyTorch's default and fragfree native alternated, its summary ending in the calls' table
#                      (bench/gpu/api_calls_table.py); then handle_size.py's CPU cost of each kind of call by
#                      backing, 20 MiB handles (expandable segments') among them, and again with 16 GiB more
#                      mapped in 2 MiB pages (does a call's cost per handle grow with the process's mappings?);
#                      ~6 min
#   BUDGET=S run36.sh fsdp   FSDP-style with expandable segments beside (PyTorch's own VMM memory, in 20 MiB
#                      handles on its large pool): if the driver's cost per handle is FSDP-style's 0.3-0.4% on an
#                      H100, expandable segments pay a fraction of it and land between PyTorch's default and fragfree
#   BUDGET=S run36.sh h200   on an H200 only, the cells the H200 has not measured yet (bench/results/
#                      2026-12-06-h100-session35.md, pooled): FSDP-style and GPT-2 + ckpt every way in, then
#                      MoE-style and GPT-2 every way in, with PyTorch's A/A beside
. bench/gpu/call_prelude.sh
case "${1:-}" in
  profile)
    for w in fsdp moe; do
      KERNEL_STEPS=5 bench/gpu/cpu_profile.sh $B/lib/libfragfree.so $w 6 torch ff-native torch ff-native \
        > "$OUT0/profile_$w.log" 2>&1
      echo "profile $w rc=$? at $((SECONDS - T0)) s"
    done
    timeout 150 python3 bench/gpu/handle_size.py --handle-mib 8,20,32 --rounds 5 > "$OUT0/handle_size.log" 2>&1
    echo "handle_size rc=$? at $((SECONDS - T0)) s"
    timeout 150 python3 bench/gpu/handle_size.py --handle-mib 20 --rounds 5 --ballast-gib 16 \
      > "$OUT0/handle_size_ballast.log" 2>&1
    echo "handle_size --ballast-gib 16 rc=$? at $((SECONDS - T0)) s"
    for w in fsdp moe; do echo "=== $w"; grep -v "^\[" "$OUT0/profile_$w.log" | tail -30 | cut -c1-220; done
    grep -h "^|\|^handle size" "$OUT0/handle_size.log" "$OUT0/handle_size_ballast.log"
    ;;
  fsdp)
    bench/gpu/gpu_call.sh steps $B/lib/libfragfree.so fsdp "$(left)" fsdp "torch,expandable,$N,$L,torch#again"
    bench/gpu/gpu_call.sh summary fsdp
    ;;
  h200)
    bench/gpu/gpu_call.sh steps $B/lib/libfragfree.so fsdp_ckpt 240 fsdp,gpt2+ckpt "torch,$N,$L,$P,torch#again"
    bench/gpu/gpu_call.sh steps $B/lib/libfragfree.so moe_gpt2 "$(left)" moe,gpt2 "torch,$N,$L,$P,torch#again"
    bench/gpu/gpu_call.sh summary fsdp_ckpt moe_gpt2
    ;;
  *) echo "usage: [BUDGET=S] $0 profile|fsdp|h200" >&2; exit 2 ;;
esac
