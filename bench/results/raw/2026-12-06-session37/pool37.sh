#!/usr/bin/env bash
# Session 37's step-time runs pooled (bench/results/raw/step_runs.txt; the tables only, beside this script):
#   large/        calls 2-5 (FSDP-style with large_page_mb at 8, 32 and 64 MiB, MoE-style at 32; call 3's MoE-style
#                 large_page_mb:32 cell is the build before large pages retire, calls 4-5 the one after)
#   retired/      calls 4 and 5 alone (the build whose large pages retire when the two sizes trade memory)
#   pooled_h100/  every H100 run of sessions 31-37; `ff-native@time_calls:False` is fragfree with large pages off
#                 in every one of them (the calls of session 37 ran before large_page_mb:32 became the default)
#   bash bench/results/raw/2026-12-06-session37/pool37.sh     (from the repository root; no GPU)
set -eu
HERE=bench/results/raw/2026-12-06-session37
bash bench/results/raw/pool_step_runs.sh h100 37 37 "$HERE/large"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
for c in call4/large32r call5/large64; do
  mkdir -p "$T/$c"; tar xzf "$HERE/$c/step_results.tgz" -C "$T/$c" ./steps/step_time.json
done
python3 bench/gpu/step_time.py --out "$T/retired" --pool "$T"/call4/large32r/steps/step_time.json \
  "$T"/call5/large64/steps/step_time.json > /dev/null
mkdir -p "$HERE/retired"; cp "$T/retired/step_time.md" "$HERE/retired/"
bash bench/results/raw/pool_step_runs.sh h100 31 37 "$HERE/pooled_h100"
