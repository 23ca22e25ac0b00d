#!/usr/bin/env bash
# Session 34, third GPU call (main's build in .carry/gpu): the two cells above 1 in call 1, MoE-style native and
# GPT-2 pluggable, again in lockstep with PyTorch's A/A beside (four processes: they fit 80 GB).
#   BUDGET=S run34c.sh
set -u
OUT0="${OUT:-$PWD/gpu-out}"; mkdir -p "$OUT0"
B=.carry/gpu
export LD_LIBRARY_PATH="$PWD/$B/lib:$PWD/$B/deps:${LD_LIBRARY_PATH:-}"
T0=$SECONDS
bench/gpu/gpu_call.sh machine
N=ff-native@time_calls:False; P=ff-pluggable@time_calls:False
bench/gpu/gpu_call.sh steps $B/lib/libfragfree.so e "$(( ${BUDGET:-150} - (SECONDS - T0) - 25 ))" moe,gpt2 \
  "torch,$N,$P,torch#again"
bench/gpu/gpu_call.sh summary e
