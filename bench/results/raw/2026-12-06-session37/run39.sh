#!/usr/bin/env bash
# Session 37's first GPU call. On an H200: the step-time cells the H200 has fewer than 3 runs of
# (bench/results/raw/2026-12-06-session35/run36.sh h200). On an H100: handle_size.py with --access-each (2 MiB pages
# whose access is set page by page beside pages set in one range, and 8 / 20 MiB handles): whether the driver's CPU
# cost of a copy grows with the access ranges it spans as well as with the handles.
. bench/gpu/call_prelude.sh
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  BUDGET=${BUDGET:-540} bash bench/results/raw/2026-12-06-session35/run36.sh h200
else
  timeout 200 python3 bench/gpu/handle_size.py --access-each --handle-mib 8,20 --rounds 5 > "$OUT0/handle_size.log" 2>&1
  echo "handle_size --access-each rc=$? at $((SECONDS - T0)) s"
  grep -h "^|\|^handle size" "$OUT0/handle_size.log"
fi
