#!/usr/bin/env bash
# Step time and the hot path on the GPU, from prebuilt binaries:
# builds nothing. LIB is libfragfree.so; the bench binaries are looked for in
# LIB's bundle (../bin beside LIB's lib/, as scripts/make_gpu_bundle.sh packs
# .carry/gpu) or $STEP_BIN. Logs and results go to a work folder packed into
# $OUT/step_results.tgz (only a few files come back from $OUT); a short table
# prints last.
#   bench/gpu/step_suite.sh LIB [SECTION...] [-- STEP_TIME_ARGS...]
# Sections (default: hotpath steps):
#   hotpath  steady_state_bench on the CUDA backend: free+alloc pairs through
#            the PyTorch entry points at 100/1k/10k live blocks with no page
#            mapping timed (p50/p99 ns), FSDP-style's calls of one step with
#            their CUDA events (ns a call), and the mapping path per page and
#            per batch of 1, 8, 64 pages
#   steps    bench/gpu/step_time.py: step time per workload and allocator,
#            alternated over rounds (its defaults: every workload and mode,
#            3 rounds, --budget-s 530 so that the call ends within 10 min)
# Arguments after "--" go to step_time.py, e.g. to split the matrix over two
# calls:  step_suite.sh LIB steps -- --workloads gpt2,gpt2+ckpt,llama+ckpt
#         step_suite.sh LIB hotpath steps -- --workloads fsdp,moe
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
LIB="$(readlink -f "$1")"; shift
SECTIONS=""
while [ $# -gt 0 ] && [ "$1" != "--" ]; do SECTIONS="$SECTIONS $1"; shift; done
[ "${1:-}" = "--" ] && shift
SECTIONS="${SECTIONS:- hotpath steps}"
RESULTS="${OUT:-$PWD/gpu-out}"
W="$(mktemp -d /tmp/fragfree-step.XXXXXX)"
mkdir -p "$RESULTS"
BUNDLE="$(dirname "$(dirname "$LIB")")"
LIBDIR="$(dirname "$LIB")"
export LD_LIBRARY_PATH="$LIBDIR:$BUNDLE/deps:${LD_LIBRARY_PATH:-}"
BIN="${STEP_BIN:-$BUNDLE/bin}"
export TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-/tmp/fragfree_torch_ext}"
export FRAGFREE_LIBRARY="$LIB"
has() { [[ " $SECTIONS " == *" $1 "* ]]; }
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import torch;print("torch",torch.__version__,"cuda",torch.version.cuda)'
} > "$W/gpu.txt" 2>&1
T0=$(date +%s)
if has hotpath; then
  if [ -x "$BIN/steady_state_bench" ]; then
    echo "== hot path ($(date +%T)) =="
    timeout 150 env FRAGFREE_BENCH_BACKEND=cuda "$BIN/steady_state_bench" \
      --benchmark_min_time=0.3 >"$W/hotpath.log" 2>&1
    echo "steady_state_bench rc=$? ($(( $(date +%s) - T0 )) s)"
  else
    echo "no $BIN/steady_state_bench: hotpath skipped" | tee "$W/hotpath.log"
  fi
fi
if has steps; then
  echo "== step time ($(date +%T)) =="
  # What is left of ~9.5 minutes goes to the rounds.
  left=$(( 540 - ($(date +%s) - T0) ))
  python3 bench/gpu/step_time.py --lib "$LIB" --out "$W/steps" --budget-s "$left" "$@" \
    2>&1 | tee "$W/step_time.log" | grep -v '^|'
fi
tar czf "$RESULTS/step_results.tgz" -C "$W" . 2>/dev/null
echo
echo "== step suite $(date -u +%F) on $(head -1 "$W/gpu.txt"):$SECTIONS ($(( $(date +%s) - T0 )) s) =="
if has hotpath; then
  echo "-- hot path, CUDA backend --"
  grep -E "^BM_|ERROR" "$W/hotpath.log" | sed -E 's/ +/ /g' | cut -c1-200
fi
if has steps && [ -f "$W/steps/step_time.md" ]; then
  cat "$W/steps/step_time.md"
fi
echo "(logs: $RESULTS/step_results.tgz)"
