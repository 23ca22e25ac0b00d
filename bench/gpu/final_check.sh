#!/usr/bin/env bash
# A short GPU check for a small device budget: the policy's step-time cost on the
# Llama checkpointing workload (reclaim_before_grow auto vs False), conformance on
# the CUDA backend (two seeds), the preload CUDA test, and pattern traces
# (bench/gpu/patterns.py) under PyTorch's allocator. Logs to $OUT.
B="${1:-.carry/gpu}"; OUT="${OUT:-$PWD/gpu-out}"; mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/$B/lib:$PWD/$B/deps:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
L="$PWD/$B/lib/libfragfree.so"
r() { n=$1; t=$2; shift 2; timeout "$t" "$@" > "$OUT/$n.log" 2>&1; echo "$n rc=$?"; }
T="python3 bench/gpu/train.py --model llama --ckpt --batch 16 --steps 8"
r llama_auto 60 $T --plug "$L" --label fragfree-auto
r llama_never 60 env FRAGFREE_CONF=reclaim_before_grow:False $T --plug "$L" --label fragfree-never
r conformance_cuda 60 "$B/bin/conformance_cuda_test" --gtest_filter='*Scatter*:*/0:*/1'
r preload_cuda 40 "$B/bin/preload_cuda_test"
r patterns 90 python3 bench/gpu/patterns.py --out "$OUT" --pattern fsdp,offload,pipeline --steps 4
grep -h RESULT "$OUT"/*.log | cut -c1-330
grep -hE "PASSED|FAILED|Failure" "$OUT"/conformance_cuda.log | head -5
tail -3 "$OUT/preload_cuda.log"
