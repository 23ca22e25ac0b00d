#!/usr/bin/env bash
# Session 36's last GPU call: the CUDA calls' CPU time a step (bench/gpu/profile_steps.py's API line) for
# FSDP-style under PyTorch's default and fragfree native with 2, 8 and 20 MiB pages, each twice, alternated:
# whether cudaMemcpyAsync's extra time on fragfree's memory falls with the handles a copy spans.
. bench/gpu/call_prelude.sh
export PYTHONPATH="$PWD/integrations/python${PYTHONPATH:+:$PYTHONPATH}" FRAGFREE_LIBRARY="$PWD/$B/lib/libfragfree.so"
for r in 1 2; do
  for m in torch ff-native ff-pages8 ff-pages20; do
    conf=""; mode=$m
    case $m in ff-pages8) mode=ff-native conf=page_size_mb:8 ;; ff-pages20) mode=ff-native conf=page_size_mb:20 ;; esac
    FRAGFREE_CONF=$conf timeout 90 taskset -c 2-7 python3 bench/gpu/profile_steps.py $mode fsdp "/tmp/flag-$m-$r" \
      --seconds 4 --kernel-steps 5 > "$OUT0/api_${m}_$r.log" 2>&1
    echo "$m round $r rc=$? at $((SECONDS - T0)) s"
    sed -i "s/^API {\"mode\": \"$mode\"/API {\"mode\": \"$m\"/" "$OUT0/api_${m}_$r.log"
  done
done
python3 bench/gpu/api_calls_table.py --top 8 "$OUT0"/api_*_1.log "$OUT0"/api_*_2.log
