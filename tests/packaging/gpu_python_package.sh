#!/usr/bin/env bash
# On the GPU machine (not in CI): the Python package installed with a real CUDA
# torch present. Checks that the install-time build made
# fragfree/_native_adapter.so with its .json (naming this torch), that
# enable(mode="native") loads that prebuilt adapter (no "compiling" line on
# stderr) and allocates on the GPU through it, and that an adapter recorded
# for another torch version is refused with both versions named and the
# compile-once fallback used. Works offline: --no-index, --no-build-isolation
# (the venv sees the system's torch and setuptools).
# Usage: tests/packaging/gpu_python_package.sh LIBFRAGFREE [PYTHON]
set -euo pipefail
lib=$(realpath "$1")
py=${2:-python3}
repo=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
"$py" -m venv --system-site-packages "$tmp/venv"
vpy=$tmp/venv/bin/python
# When python3 is itself a virtual environment (the GPU image's is), the new
# one's --system-site-packages sees the base interpreter only: point it at
# python3's own site-packages too.
parent_site=$("$py" -c 'import site; print(site.getsitepackages()[0])')
"$vpy" -c 'import site; print(site.getsitepackages()[0])' |
  xargs -I{} sh -c "echo '$parent_site' > {}/_parent_site.pth"
"$vpy" -c 'import torch, setuptools; print("torch", torch.__version__, "cuda", torch.version.cuda)'
cp -r "$repo/integrations/python" "$tmp/src"
rm -rf "$tmp/src/build" "$tmp/src"/*.egg-info
start=$SECONDS
FRAGFREE_PREBUILT_LIBRARY=$lib FRAGFREE_BUILD_NATIVE_ADAPTER=1 \
  "$vpy" -m pip install -v --no-index --no-build-isolation --no-deps "$tmp/src" \
  >"$tmp/pip.log" 2>&1 || { tail -40 "$tmp/pip.log"; fail "pip install"; }
grep "fragfree setup:" "$tmp/pip.log" || true
echo "install with the adapter build: $((SECONDS - start)) s"
site=$("$vpy" -c 'import fragfree, os; print(os.path.dirname(fragfree.__file__))')
ls -la "$site"
[[ -f "$site/_native_adapter.so" && -f "$site/_native_adapter.json" ]] ||
  fail "no prebuilt adapter in $site"
cat "$site/_native_adapter.json"
cd "$tmp"
probe='
import time
t0 = time.perf_counter()
import fragfree, torch
t1 = time.perf_counter()
fragfree.enable(mode="native")
print("enable_native_s %.3f (import fragfree+torch %.3f s)" % (time.perf_counter() - t1, t1 - t0))
x = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
print("allocated", torch.cuda.memory_allocated(), "lib", fragfree.library().path)
del x
'
"$vpy" -c "$probe" >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err"; fail "enable(mode=native)"; }
cat "$tmp/out" "$tmp/err"
grep -q "compiling the native adapter" "$tmp/err" && fail "the prebuilt adapter was not used"
grep -q "^allocated [1-9]" "$tmp/out" || fail "no allocation through the adapter"
# An adapter recorded for another torch: refused, naming both, and compiled once.
"$vpy" - "$site/_native_adapter.json" <<'PY'
import json, sys
p = sys.argv[1]
m = json.load(open(p))
m["torch"] = "0.0.1+other"
json.dump(m, open(p, "w"))
PY
TORCH_EXTENSIONS_DIR=$tmp/ext "$vpy" -c "$probe" >"$tmp/out" 2>"$tmp/err" ||
  { cat "$tmp/err"; fail "fallback compile"; }
cat "$tmp/err"
grep -q "built for torch 0.0.1+other" "$tmp/err" || fail "refusal does not name the recorded version"
grep -q "compiling the native adapter for torch" "$tmp/err" || fail "no compile-once message"
echo "gpu python package ok"
