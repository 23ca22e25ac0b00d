#!/usr/bin/env bash
# Prepared in session 38, not run in it (its device time was spent): FSDP-style's first gather split into its calls
# (bench/gpu/workloads.py's marks empty0, repeat0, gather0) in every way in and under expandable segments (PyTorch's
# own allocator on VMM, 20 MiB handles), beside PyTorch's A/A, lockstep. Session 38 found fragfree's step longer by
# ~0.02 ms at the first gather in native and LD_PRELOAD mode alike; whether expandable segments pay it too tells
# VMM-backed memory's cost in the driver from the engine's. On an H200 first: the hot path and the mapping path.
. bench/gpu/call_prelude.sh
if nvidia-smi -L | grep -q H200; then
  python3 bench/micro/hot_ab.py --rounds 30 --budget-s 45 --cpu 5 --backends cuda,host \
    main=$B/bin/steady_state_bench > "$OUT0/hot_ab.log" 2>&1
  echo "hot_ab rc=$? at $((SECONDS - T0)) s"; tail -8 "$OUT0/hot_ab.log"
  timeout 60 env FRAGFREE_BENCH_BACKEND=cuda $B/bin/steady_state_bench --benchmark_min_time=0.2 \
    --benchmark_filter='MapPages|CreateRelease' > "$OUT0/mapping.log" 2>&1
  grep -E "^BM_" "$OUT0/mapping.log" | sed -E 's/ +/ /g'
fi
bench/gpu/gpu_call.sh steps $B/lib/libfragfree.so gather "$(left)" fsdp "torch,expandable,$N,$L,$P,torch#again"
bench/gpu/gpu_call.sh summary gather
