#!/usr/bin/env bash
# Prepared in session 38, not run in it (its device time was spent): FSDP-style's first gather split into its calls
# (bench/gpu/workloads.py's marks empty0, repeat0, gather0) with fragfree native, LD_PRELOAD, native with time_calls on
# (the engine's own CPU time a step) and expandable segments (PyTorch's own allocator on VMM memory, 20 MiB handles),
# beside PyTorch's A/A, lockstep, step_time.py no longer reading fragfree's stats between steps (--series off).
# Session 38 found fragfree's first gather ~0.02 ms longer in every way in; this tells whether it was that read, the
# engine, or VMM-mapped memory in the driver. On an H200 first: the hot path and the mapping path.
. bench/gpu/call_prelude.sh
nvidia-smi -L | grep -q H200 && bench/gpu/gpu_call.sh hotpath $B/bin/steady_state_bench
timeout 60 env FRAGFREE_BENCH_BACKEND=cuda $B/bin/steady_state_bench --benchmark_filter=HandoffStep \
  --benchmark_min_time=0.5 > "$OUT0/handoff.log" 2>&1
grep -E "^BM_" "$OUT0/handoff.log" | sed -E 's/ +/ /g'
bench/gpu/gpu_call.sh steps $B/lib/libfragfree.so gather "$(left)" fsdp "torch,expandable,$N,ff-native,$L,torch#again"
bench/gpu/gpu_call.sh summary gather
