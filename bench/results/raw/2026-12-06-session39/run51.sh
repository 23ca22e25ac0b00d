#!/usr/bin/env bash
# Session 39's second GPU call (the first was `BUDGET=560 bash raw/2026-12-06-session38/run49.sh`): the default
# (large_page_mb:32) in every way in on FSDP-style, GPT-2 + ckpt and Llama + ckpt beside PyTorch's A/A, lockstep, with
# step_time.py reading nothing of fragfree's between steps (--series off, its default since session 38's end).
. bench/gpu/call_prelude.sh
BUDGET=540
bench/gpu/gpu_call.sh steps $B/lib/libfragfree.so all3 "$(left)" fsdp,gpt2+ckpt,llama+ckpt "torch,$N,$L,$P,torch#again"
bench/gpu/gpu_call.sh summary all3
