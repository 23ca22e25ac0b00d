#!/usr/bin/env bash
# Session 36's step-time runs pooled (bench/results/raw/step_runs.txt; the tables only, beside this script):
#   pages/        calls 2 and 3 (FSDP-style, MoE-style; fragfree at 2, 8 and 20 MiB pages; PyTorch's A/A)
#   pooled_h100/  every H100 run of sessions 31-36 (the engine's default path is unchanged since 4df7e32:
#                 page_size_mb is off by default)
#   bash bench/results/raw/2026-12-06-session36/pool36.sh     (from the repository root; no GPU)
set -eu
HERE=bench/results/raw/2026-12-06-session36
bash bench/results/raw/pool_step_runs.sh h100 36 36 "$HERE/pages"
bash bench/results/raw/pool_step_runs.sh h100 31 36 "$HERE/pooled_h100"
