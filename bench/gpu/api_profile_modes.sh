#!/usr/bin/env bash
# The CUDA runtime calls' CPU time a step (profile_steps.py's API line) of one workload under several modes, each run
# ROUNDS times, alternated, then api_calls_table.py's table of them. A mode is NAME or NAME=CONF: NAME is
# profile_steps.py's mode (torch, ff-native, ...) or, with =CONF, ff-native under FRAGFREE_CONF=CONF, labelled NAME.
# Sourced after bench/gpu/call_prelude.sh (OUT0, T0).
#   api_profile_modes WORKLOAD ROUNDS MODE...
api_profile_modes() {
  local workload=$1 rounds=$2 r m name conf mode; shift 2
  for r in $(seq 1 "$rounds"); do
    for m in "$@"; do
      name=${m%%=*}; conf=""; mode=$name
      [ "$m" != "$name" ] && { conf=${m#*=}; mode=ff-native; }
      FRAGFREE_CONF=$conf timeout 90 taskset -c 2-7 python3 bench/gpu/profile_steps.py $mode "$workload" \
        "/tmp/flag-$name-$r" --seconds 4 --kernel-steps 5 > "$OUT0/api_${name}_$r.log" 2>&1
      echo "$name round $r rc=$? at $((SECONDS - T0)) s"
      sed -i "s/^API {\"mode\": \"$mode\"/API {\"mode\": \"$name\"/" "$OUT0/api_${name}_$r.log"
    done
  done
  local logs=()
  for r in $(seq 1 "$rounds"); do logs+=("$OUT0"/api_*_"$r".log); done
  python3 bench/gpu/api_calls_table.py --top 8 "${logs[@]}"
}
