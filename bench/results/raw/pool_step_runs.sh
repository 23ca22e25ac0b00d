#!/usr/bin/env bash
# Pools the step-time calls of step_runs.txt (beside this script) on one GPU kind over a range of sessions with
# bench/gpu/step_time.py --pool, and writes the tables (step_time.md) into OUT.
#   bash bench/results/raw/pool_step_runs.sh KIND FIRST_SESSION LAST_SESSION OUT   (from the repository root; no GPU)
set -eu
[ $# -eq 4 ] || { echo "usage: $0 KIND FIRST_SESSION LAST_SESSION OUT" >&2; exit 2; }
kind=$1 first=$2 last=$3 out=$4
R=$(dirname "$0"); T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
files=()
while read -r k s path; do
  case "$k" in ''|'#'*) continue ;; esac
  [ "$k" = "$kind" ] && [ "$s" -ge "$first" ] && [ "$s" -le "$last" ] || continue
  if [ "${path%.tgz}" != "$path" ]; then
    mkdir -p "$T/$path"; tar xzf "$R/$path" -C "$T/$path" ./steps/step_time.json
    files+=("$T/$path/steps/step_time.json")
  else
    files+=("$R/$path")
  fi
done < "$R/step_runs.txt"
[ ${#files[@]} -gt 0 ] || { echo "no $kind calls in sessions $first-$last" >&2; exit 1; }
python3 bench/gpu/step_time.py --out "$T/pooled" --pool "${files[@]}" > /dev/null
mkdir -p "$out"; cp "$T/pooled/step_time.md" "$out/"
