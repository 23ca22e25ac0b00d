#!/usr/bin/env bash
# The step-time runs of sessions 31-35 (one engine: allocator/ unchanged since 4df7e32, move_time_budget default 0)
# pooled by GPU kind (bench/results/raw/step_runs.txt), into pooled_h100/ and pooled_h200/ beside this script (the
# tables only).
#   bash bench/results/raw/2026-12-06-session35/pool35.sh     (from the repository root; no GPU)
set -eu
HERE=bench/results/raw/2026-12-06-session35
for kind in h100 h200; do bash bench/results/raw/pool_step_runs.sh $kind 31 35 "$HERE/pooled_$kind"; done
