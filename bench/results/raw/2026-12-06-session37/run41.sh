#!/usr/bin/env bash
# Session 37's third GPU call: large_page_mb:32 (Note [Large pages]). First the CUDA calls' CPU time a step
# (profile_steps.py's API line) of FSDP-style under PyTorch's default, fragfree's defaults and large_page_mb:32, twice,
# alternated: whether cudaMemcpyAsync's extra time on fragfree's memory goes with its 64 MiB blocks in 32 MiB pages;
# then FSDP-style and MoE-style step time and memory, the same modes beside PyTorch's A/A, for the rest of the call.
. bench/gpu/call_prelude.sh
export PYTHONPATH="$PWD/integrations/python${PYTHONPATH:+:$PYTHONPATH}" FRAGFREE_LIBRARY="$PWD/$B/lib/libfragfree.so"
for r in 1 2; do
  for m in torch ff-native ff-large32; do
    conf=""; mode=$m
    case $m in ff-large32) mode=ff-native conf=large_page_mb:32 ;; esac
    FRAGFREE_CONF=$conf timeout 90 taskset -c 2-7 python3 bench/gpu/profile_steps.py $mode fsdp "/tmp/flag-$m-$r" \
      --seconds 4 --kernel-steps 5 > "$OUT0/api_${m}_$r.log" 2>&1
    echo "$m round $r rc=$? at $((SECONDS - T0)) s"
    sed -i "s/^API {\"mode\": \"$mode\"/API {\"mode\": \"$m\"/" "$OUT0/api_${m}_$r.log"
  done
done
python3 bench/gpu/api_calls_table.py --top 8 "$OUT0"/api_*_1.log "$OUT0"/api_*_2.log
bench/gpu/gpu_call.sh steps $B/lib/libfragfree.so large32 "$(left)" fsdp,moe \
  "torch,$N,$N+large_page_mb:32,torch#again"
bench/gpu/gpu_call.sh summary large32
