#!/usr/bin/env bash
# The step-time runs of sessions 31-35 (one engine: allocator/ unchanged since 4df7e32, move_time_budget default 0)
# pooled by GPU kind with bench/gpu/step_time.py --pool, into pooled_h100/ and pooled_h200/ beside this script (the
# tables only).
#   bash bench/results/raw/2026-12-06-session35/pool35.sh     (from the repository root; no GPU)
set -eu
R=bench/results/raw; HERE=$R/2026-12-06-session35; T=$(mktemp -d)
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
h200="$R/2026-12-06-session32/call1/fsdp_step_time.json $R/2026-12-06-session32/call1/moe_gpt2_step_time.json
  $R/2026-12-06-session33/call3/llama_step_time.json $R/2026-12-06-session33/call3/moe_gpt2_step_time.json"
for kind in h100 h200; do
  eval "files=\$$kind"
  # shellcheck disable=SC2086
  python3 bench/gpu/step_time.py --out "$T/pooled_$kind" --pool $files > /dev/null
  mkdir -p "$HERE/pooled_$kind"; cp "$T/pooled_$kind/step_time.md" "$HERE/pooled_$kind/"
done
rm -rf "$T"
