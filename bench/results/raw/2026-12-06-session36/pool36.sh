#!/usr/bin/env bash
# Session 36's step-time runs pooled with bench/gpu/step_time.py --pool (the tables only, beside this script):
#   pages/        calls 2 and 3 (FSDP-style, MoE-style; fragfree at 2, 8 and 20 MiB pages; PyTorch's A/A)
#   pooled_h100/  every H100 run of sessions 31-36 (session 35's pool35.sh set, plus calls 2 and 3 here; the
#                 engine's default path is unchanged since 4df7e32: page_size_mb is off by default)
#   bash bench/results/raw/2026-12-06-session36/pool36.sh     (from the repository root; no GPU)
set -eu
R=bench/results/raw; HERE=$R/2026-12-06-session36; T=$(mktemp -d)
pages=""
for d in call2/fsdp_pages call3/moe_pages; do
  mkdir -p "$T/$d"; tar xzf "$HERE/$d/step_results.tgz" -C "$T/$d" ./steps/step_time.json
  pages="$pages $T/$d/steps/step_time.json"
done
h100="$R/2026-12-05-session31/call1/step_time.json $R/2026-12-06-session33/call1/ckpt_step_time.json
  $R/2026-12-06-session33/call1/fsdp_moe_gpt2_step_time.json $R/2026-12-06-session33/call2/ckpt_step_time.json
  $R/2026-12-06-session33/call2/fsdp_step_time.json"
for d in 2026-12-06-session34/call1/a 2026-12-06-session34/call1/b 2026-12-06-session34/call2/c \
    2026-12-06-session34/call2/d 2026-12-06-session35/call1/fsdp_ckpt 2026-12-06-session35/call1/llama \
    2026-12-06-session35/call2/moe_gpt2 2026-12-06-session35/call2/moe_gpt2_preload 2026-12-06-session35/call4/moe \
    2026-12-06-session35/call5/moe; do
  mkdir -p "$T/$d"; tar xzf "$R/$d/step_results.tgz" -C "$T/$d" ./steps/step_time.json
  h100="$h100 $T/$d/steps/step_time.json"
done
for set in pages h100; do
  eval "files=\$$set"
  [ "$set" = h100 ] && files="$files $pages" && out=pooled_h100 || out=$set
  # shellcheck disable=SC2086
  python3 bench/gpu/step_time.py --out "$T/$out" --pool $files > /dev/null
  mkdir -p "$HERE/$out"; cp "$T/$out/step_time.md" "$HERE/$out/"
done
rm -rf "$T"
