#!/usr/bin/env bash
# The GPU suite, run on a machine with an NVIDIA GPU from a prebuilt bundle
# (scripts/make_gpu_bundle.sh packs build outputs and their shared-library deps
# into .carry/gpu). Logs and results go to a work folder, packed at the end
# into $OUT/gpu_results.tgz (snapshots and plots left out when large; $OUT
# defaults to ./gpu-out); a summary prints last.
#   bench/gpu/run_gpu_suite.sh [BUNDLE] [SECTION...]
# Sections (default: tests bench python oom viz pinned patterns):
#   tests     every *_test binary of the bundle (conformance, stress, preload on
#             the CUDA backend included)
#   bench     the hot path on the CUDA backend (malloc_free_bench)
#   python    integrations/python/tests/gpu_smoke.py, both modes ($PY_CHECKS:
#             only those checks)
#   oom       bench/gpu/oom_examples.py: the two deliberate OOMs and reports
#   viz       a GPT-2 run under LD_PRELOAD whose exit snapshot (written by the
#             library) goes through python -m torch.cuda._memory_viz
#   pinned    bench/gpu/pinned_offload.py (footprint and bandwidth)
#   patterns  bench/gpu/patterns.py --pattern generate (a trace for replay)
#   train     bench/gpu/train_matrix.py (losses, U_alloc, step time, leaks;
#             $TRAIN_CONFIGS, $TRAIN_MODES, $TRAIN_STEPS, $TRAIN_ROUNDS select)
#   overhead  bench/gpu/alloc_overhead.py: CPU cost of one tensor allocation
#             through PyTorch under each mode ($OVERHEAD_MODES)
set -uo pipefail
cd "$(dirname "$0")/../.."
B="${1:-.carry/gpu}"
shift || true
SECTIONS="${*:-tests bench python oom viz pinned patterns}"
RESULTS="${OUT:-$PWD/gpu-out}"
OUT="$(mktemp -d /tmp/fragfree-gpu.XXXXXX)"
mkdir -p "$RESULTS"
export LD_LIBRARY_PATH="$PWD/$B/lib:$PWD/$B/deps:${LD_LIBRARY_PATH:-}"
export TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-/tmp/fragfree_torch_ext}"
LIB="$PWD/$B/lib/libfragfree.so"
export FRAGFREE_LIBRARY="$LIB"
declare -a ROWS
row() { ROWS+=("$(printf '%-40s %s' "$1" "$2")"); }
run() {  # name, timeout seconds, command...
  local name="$1" limit="$2"; shift 2
  local t0=$(date +%s)
  if timeout "$limit" "$@" >"$OUT/$name.log" 2>&1; then
    row "$name" "PASS ($(( $(date +%s) - t0 ))s)"
  else
    row "$name" "FAIL rc=$? ($(( $(date +%s) - t0 ))s, see $name.log)"
    tail -8 "$OUT/$name.log"
  fi
}
has() { [[ " $SECTIONS " == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt" 2>&1
python3 -c 'import torch;print("torch",torch.__version__,"cuda",torch.version.cuda)' >> "$OUT/gpu.txt" 2>&1

if has tests; then
  for t in "$B"/bin/*_test; do
    [ -x "$t" ] || continue
    # The environment ctest gives some host tests (tests/*/CMakeLists.txt);
    # the preload host tests need the fake CUDA runtime of a build tree (CI
    # runs them), so they are not run from a bundle.
    case "$(basename "$t")" in
      preload_host_test|preload_local_test) continue ;;
      host_api_test) run host_api_test 180 env FRAGFREE_CONF=backend:host \
        FRAGFREE_HOST_CONF=chunk_mb:4,emulate_populate:False "$t" ;;
      metadata_fallback_test) run metadata_fallback_test 60 env FRAGFREE_JEMALLOC=0 "$t" ;;
      *) run "$(basename "$t")" 180 "$t" ;;
    esac
  done
fi
if has bench; then
  for bench in "$B"/bin/malloc_free_bench*; do  # *_<label>: another build's, side by side
    run "$(basename "$bench" | sed 's/malloc_free_bench/bench_cuda/')" 120 \
      env FRAGFREE_BENCH_BACKEND=cuda "$bench" --benchmark_min_time=0.2
  done
fi
if has overhead; then
  run alloc_overhead 300 python3 bench/gpu/alloc_overhead.py --lib "$LIB" \
    ${OVERHEAD_MODES:+--modes "$OVERHEAD_MODES"}
fi
if has train; then
  run train_matrix 590 python3 bench/gpu/train_matrix.py --lib "$LIB" --out "$OUT/train" \
    --steps "${TRAIN_STEPS:-100}" --rounds "${TRAIN_ROUNDS:-1}" ${TRAIN_CONFIGS:+--configs "$TRAIN_CONFIGS"} ${TRAIN_MODES:+--modes "$TRAIN_MODES"}
fi
if has python; then
  if [ -n "${PY_CHECKS:-}" ]; then  # a subset, e.g. PY_CHECKS="p_snapshot_viz n_mempool"
    for c in $PY_CHECKS; do
      python3 integrations/python/tests/gpu_smoke.py --check "$c" >>"$OUT/python_gpu_smoke.log" 2>&1
    done
    row python_gpu_smoke "$(grep -c '^PASS' "$OUT/python_gpu_smoke.log") of $(echo $PY_CHECKS | wc -w) passed"
  else
    run python_gpu_smoke 330 python3 integrations/python/tests/gpu_smoke.py --timeout 120
  fi
fi
if has oom; then
  for c in activations persistent; do
    run "oom_$c" 150 python3 bench/gpu/oom_examples.py --case $c --out "$OUT/oom_$c"
  done
fi
if has viz; then
  V="$OUT/viz"; mkdir -p "$V"
  run viz_train_preload 120 env LD_PRELOAD="$LIB" \
    FRAGFREE_CONF="trace_entries:300000,snapshot_path:$V/preload_exit.pickle,stats_at_exit:True" \
    python3 bench/gpu/train_check.py --mode preload --model gpt2 --steps 12
  run viz_stats 60 python3 -m torch.cuda._memory_viz stats "$V/preload_exit.pickle"
  run viz_trace_plot 60 python3 -m torch.cuda._memory_viz trace_plot "$V/preload_exit.pickle" -o "$V/trace_plot.html"
  run viz_segment_plot 60 python3 -m torch.cuda._memory_viz segment_plot "$V/preload_exit.pickle" -o "$V/segment_plot.html"
fi
if has pinned; then
  run pinned_bench 120 "$B/bin/pinned_bench" --benchmark_min_time=0.05 \
    --benchmark_filter='PoolAllocFree|PinPerRequest|CudaHostAlloc'
  run pinned_offload 150 python3 bench/gpu/pinned_offload.py --lib "$LIB"
  run pinned_bandwidth 90 python3 bench/gpu/pinned_offload.py --lib "$LIB" --bandwidth
fi
if has patterns; then
  run pattern_generate 120 python3 bench/gpu/patterns.py --out "$OUT/patterns" --pattern generate --steps 6
fi

echo
echo "== GPU suite $(date -u +%F) on $(head -1 "$OUT/gpu.txt"): $SECTIONS =="
printf '%s\n' "${ROWS[@]}"
if has bench; then
  for f in "$OUT"/bench_cuda*.log; do
    echo "-- hot path, CUDA backend (free+alloc pair): $(basename "$f" .log) --"
    grep -E "^BM_" "$f" | sed -E 's/ +/ /g' | cut -c1-160
  done
fi
has python && grep -E "^(PASS|FAIL)|checks passed" "$OUT/python_gpu_smoke.log" | cut -c1-200
has oom && grep -h "^RESULT" "$OUT"/oom_*.log | cut -c1-900
has viz && grep -h "^RESULT" "$OUT/viz_train_preload.log" | cut -c1-400 && head -c 600 "$OUT/viz_stats.log"
has pinned && grep -E "^(Pool|Pin|Cuda)" "$OUT/pinned_bench.log" | sed -E 's/ +/ /g' | cut -c1-120
has pinned && tail -15 "$OUT/pinned_offload.log" && tail -12 "$OUT/pinned_bandwidth.log"
has patterns && grep -h "RESULT" "$OUT/pattern_generate.log" | cut -c1-300
has overhead && grep -v "^RAW" "$OUT/alloc_overhead.log" | tail -8
has train && tail -20 "$OUT/train_matrix.log"
grep -h "stress:" "$OUT"/stress_cuda_test.log 2>/dev/null | cut -c1-400
printf '%s\n' "${ROWS[@]}" > "$OUT/summary.txt"
(cd "$OUT" && find . -type f -size +4M ! -name '*.csv.gz' -print > left_out.txt)
tar czf "$RESULTS/gpu_results.tgz" -C "$OUT" --exclude-from="$OUT/left_out.txt" . 2>/dev/null ||
  tar czf "$RESULTS/gpu_results.tgz" -C "$OUT" .
exit 0
