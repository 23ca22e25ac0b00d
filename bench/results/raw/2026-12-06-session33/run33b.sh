#!/usr/bin/env bash
# Session 33, call 3 (main's build in .carry/gpu): step time in lockstep with PyTorch's A/A beside, the workloads
# call 1 ran without one: MoE-style and GPT-2 (native and pluggable: with preload too, five processes outgrow an
# 80 GB card), then Llama + ckpt every way in, with what is left.   BUDGET=S [A_S=S] run33b.sh
set -u
B=.carry/gpu
T0=$SECONDS
bench/gpu/gpu_call.sh machine
N=ff-native@time_calls:False; P=ff-pluggable@time_calls:False; L=ff-preload@time_calls:False
bench/gpu/gpu_call.sh steps $B/lib/libfragfree.so moe_gpt2 "${A_S:-300}" moe,gpt2 "torch,$N,$P,torch#again"
bench/gpu/gpu_call.sh steps $B/lib/libfragfree.so llama "$(( ${BUDGET:-540} - (SECONDS - T0) - 25 ))" llama+ckpt "torch,$N,$L,$P,torch#again"
bench/gpu/gpu_call.sh summary moe_gpt2 llama
