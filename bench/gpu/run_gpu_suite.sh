#!/usr/bin/env bash
# The whole GPU suite, run on a machine with an NVIDIA GPU from a prebuilt bundle
# (scripts/make_gpu_bundle.sh packs build outputs and their shared-library deps
# into .carry/gpu). Logs go to $OUT (or ./gpu-out); a summary table prints last.
#   bench/gpu/run_gpu_suite.sh [.carry/gpu]
set -uo pipefail
cd "$(dirname "$0")/../.."
B="${1:-.carry/gpu}"
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/$B/lib:$PWD/$B/deps:${LD_LIBRARY_PATH:-}"
LIB="$PWD/$B/lib/libfragfree.so"
declare -a ROWS
row() { ROWS+=("$(printf '%-44s %s' "$1" "$2")"); }
run() {  # name, command...
  local name="$1"; shift
  local t0=$(date +%s)
  if "$@" >"$OUT/$name.log" 2>&1; then row "$name" "PASS ($(( $(date +%s) - t0 ))s)";
  else row "$name" "FAIL rc=$? (see $name.log)"; tail -20 "$OUT/$name.log"; fi
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt" 2>&1
python3 -c 'import torch;print("torch",torch.__version__,"cuda",torch.version.cuda)' >> "$OUT/gpu.txt" 2>&1

for t in "$B"/bin/*_test; do
  [ -x "$t" ] || continue
  run "$(basename "$t")" "$t"
done
run bench_cuda env FRAGFREE_BENCH_BACKEND=cuda "$B/bin/malloc_free_bench" --benchmark_min_time=0.3
grep -E "^BM_" "$OUT/bench_cuda.log" | awk '{print "  " $1, $0}' | sed 's/  BM_[^ ]* //' > "$OUT/bench_cuda.txt"

# Training: PyTorch's default allocator, expandable segments, fragfree (pluggable).
T="python3 bench/gpu/train.py --steps ${TRAIN_STEPS:-12}"
for model in gpt2 llama; do
  extra=""; [ "$model" = llama ] && extra="--ckpt --batch 16"
  run "train_${model}_native" $T --model $model $extra --label native
  run "train_${model}_expandable" env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True $T --model $model $extra --label expandable
  run "train_${model}_fragfree" env FRAGFREE_CONF=stats_at_exit:True $T --model $model $extra --plug "$LIB" --label fragfree
done

echo
echo "== GPU suite $(date -u +%F) on $(head -1 "$OUT/gpu.txt") =="
printf '%s\n' "${ROWS[@]}"
echo "-- hot path, CUDA backend (free+alloc pair) --"
grep -E "^BM_" "$OUT/bench_cuda.log" | sed -E 's/ +/ /g' | cut -c1-150
echo "-- training (RESULT lines) --"
grep -h "^RESULT" "$OUT"/train_*.log | sed 's/^RESULT //' | cut -c1-400
