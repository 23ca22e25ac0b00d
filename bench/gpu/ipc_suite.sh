#!/usr/bin/env bash
# CUDA IPC on a GPU, in one command (docs/ipc.md): the non-torch program pair
# (bench/gpu/ipc_pair.cu) bare and under LD_PRELOAD, PyTorch sharing per
# allocator setup with export/open costs (bench/gpu/ipc_check.py), stock
# PyTorch <-> fragfree interop and a sharing stress
# (bench/gpu/ipc_interop.py). Logs go to $OUT (default: a new temp folder);
# a short table is printed at the end.
# Usage: bench/gpu/ipc_suite.sh /path/to/libfragfree.so
#   env: PYTHON (python3), OUT, ITERATIONS (stress iterations, 300),
#        CUDA_ARCH (sm_90)
set -uo pipefail
lib=$(realpath "${1:?usage: ipc_suite.sh LIBFRAGFREE}")
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
py=${PYTHON:-python3}
iters=${ITERATIONS:-300}
arch=${CUDA_ARCH:-sm_90}
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
summary=()
# Children find the package (also under LD_PRELOAD: the bootstrap looks on
# PYTHONPATH) and share one compiled native adapter, built once here.
export PYTHONPATH="$here/../../integrations/python${PYTHONPATH:+:$PYTHONPATH}"
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$out/torch_extensions}
export FRAGFREE_LIBRARY="$lib"
"$py" -c 'import fragfree, torch; fragfree.enable(mode="native"); torch.empty(1, device="cuda")' \
  >"$out/adapter.log" 2>&1 || echo "== native adapter did not load: $out/adapter.log"

# step NAME COMMAND...: runs it with its output in $out/NAME.log.
step() {
  local name=$1
  shift
  local t0=$SECONDS
  "$@" >"$out/$name.log" 2>&1
  local rc=$?
  summary+=("$(printf '%-22s rc=%-3s %4ss  %s' "$name" "$rc" $((SECONDS - t0)) "$out/$name.log")")
  echo "== $name: rc=$rc (log $out/$name.log)"
  return 0
}

echo "fragfree IPC suite: lib $lib, logs in $out"
cuda_root=$(dirname "$(dirname "$nvcc")")
if "$nvcc" -O2 -arch="$arch" -o "$out/ipc_pair" "$here/ipc_pair.cu" -lcuda \
    >"$out/build.log" 2>&1 ||
  "$nvcc" -O2 -arch="$arch" -o "$out/ipc_pair" "$here/ipc_pair.cu" \
    -L"$cuda_root/lib64/stubs" -L"$cuda_root/lib/stubs" -lcuda >>"$out/build.log" 2>&1; then
  step pair_cuda "$out/ipc_pair" "$iters"
  step pair_fragfree env LD_PRELOAD="$lib" "$out/ipc_pair" "$iters"
else
  echo "== ipc_pair did not build: $out/build.log"
  summary+=("ipc_pair               did not build ($out/build.log)")
fi
step torch_modes "$py" "$here/ipc_check.py" --lib "$lib"
step torch_interop "$py" "$here/ipc_interop.py" --lib "$lib" interop
step torch_stress "$py" "$here/ipc_interop.py" --lib "$lib" stress --iterations "$iters"

echo
echo "==== summary ===="
printf '%s\n' "${summary[@]}"
for name in pair_cuda pair_fragfree; do
  [[ -f "$out/$name.log" ]] || continue
  echo "-- $name: $(grep -E '^ipc_pair: [0-9]+ passed' "$out/$name.log" || echo 'no result line')"
  grep '^FAIL' "$out/$name.log" | head -20
done
echo "-- torch_modes (ipc_check.py):"
sed -n '/^ptrace_scope=/,/^JSON /p' "$out/torch_modes.log" | grep -v '^JSON '
echo "-- torch_interop:"
grep -v -E '^(JSON |RESULT )' "$out/torch_interop.log" | tail -12
echo "-- torch_stress:"
grep -v -E '^(JSON |RESULT )' "$out/torch_stress.log" | tail -6
