#!/usr/bin/env bash
# Session 33, call 2 (main's build in .carry/gpu, perf in .carry/perf): (1) FSDP-style's CPU profile and kernel
# times, mode against mode (bench/gpu/cpu_profile.sh); (2) FSDP-style in lockstep with PyTorch's A/A beside;
# (3) GPT-2 + ckpt likewise, with what is left.   BUDGET=S [PROF_S=S] [FSDP_S=S] run33a.sh
set -u
OUT="${OUT:-$PWD/gpu-out}"; mkdir -p "$OUT"
B=.carry/gpu
T0=$SECONDS
OUT="$OUT" bench/gpu/gpu_call.sh machine
OUT="$OUT" timeout "${PROF_S:-170}" bash bench/gpu/cpu_profile.sh $B/lib/libfragfree.so fsdp 5 \
  torch ff-native ff-pluggable ff-preload torch > "$OUT/profile.txt" 2>&1
echo "profile rc=$? at $((SECONDS - T0)) s"
FF='ff-native@time_calls:False,ff-preload@time_calls:False,ff-pluggable@time_calls:False'
bench/gpu/gpu_call.sh steps $B/lib/libfragfree.so fsdp "${FSDP_S:-150}" fsdp "torch,$FF,torch#again"
bench/gpu/gpu_call.sh steps $B/lib/libfragfree.so ckpt "$(( ${BUDGET:-450} - (SECONDS - T0) - 25 ))" gpt2+ckpt "torch,ff-native@time_calls:False,ff-pluggable@time_calls:False,torch#again"
echo "=== profile (blocking sync)"; cat "$OUT/profile.txt"
bench/gpu/gpu_call.sh summary fsdp ckpt
