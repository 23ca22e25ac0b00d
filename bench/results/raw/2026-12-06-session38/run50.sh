#!/usr/bin/env bash
# Prepared for session 38's last device minutes and refused (too little device time left to start a machine), so not
# run: FSDP-style's split first gather with step_time.py
# no longer reading fragfree's stats between steps (--series off), fragfree native and expandable segments beside
# PyTorch's A/A, lockstep, for SECS (default 100) seconds: run49.sh's question in as many rounds as fit (a short call).
. bench/gpu/call_prelude.sh
bench/gpu/gpu_call.sh steps $B/lib/libfragfree.so noseries "${SECS:-100}" fsdp "torch,$N,expandable,torch#again"
bench/gpu/gpu_call.sh summary noseries | tail -8
