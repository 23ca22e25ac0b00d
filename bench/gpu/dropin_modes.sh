#!/usr/bin/env bash
# Runs integrations/python/tests/gpu_dropin.py in every way in (PyTorch's own
# allocator first: it is the spec) and prints one row per mode and check.
#   bench/gpu/dropin_modes.sh LIB [MODE...]   (default: default native pluggable auto preload)
# LIB is libfragfree.so; logs and the JSON lines go to $OUT (default ./gpu-out).
set -uo pipefail
cd "$(dirname "$0")/../.."
LIB="$(readlink -f "$1")"; shift
MODES="${*:-default native pluggable auto preload}"
RESULTS="${OUT:-$PWD/gpu-out}"; mkdir -p "$RESULTS"
export PYTHONPATH="$PWD/integrations/python${PYTHONPATH:+:$PYTHONPATH}"
export FRAGFREE_LIBRARY="$LIB"
export TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-/tmp/fragfree_torch_ext}"
T=integrations/python/tests/gpu_dropin.py
for m in $MODES; do
  start=$SECONDS
  if [ "$m" = preload ]; then
    (unset FRAGFREE_LIBRARY; LD_PRELOAD="$LIB" python3 "$T" --mode preload) >"$RESULTS/dropin_$m.json" 2>"$RESULTS/dropin_$m.err"
  else
    python3 "$T" --mode "$m" >"$RESULTS/dropin_$m.json" 2>"$RESULTS/dropin_$m.err"
  fi
  echo "$m: rc=$? $((SECONDS - start)) s"
done
python3 - "$RESULTS" $MODES <<'PY'
import json, sys
d, modes = sys.argv[1], sys.argv[2:]
res = {}
for m in modes:
    try:
        line = [l for l in open(f"{d}/dropin_{m}.json") if l.startswith("{")][-1]
        res[m] = json.loads(line)
    except Exception as e:
        res[m] = {"ok": False, "checks": {}, "error": str(e)}
names = sorted({n for r in res.values() for n in r.get("checks", {})})
print("| check | " + " | ".join(modes) + " |")
print("|---|" + "---|" * len(modes))
def cell(c):
    if c is None: return "-"
    ok = c.get("ok")
    return {True: "pass", False: "FAIL", None: "skip"}.get(ok, str(ok)) if not c.get("expected_fail") else "expected-fail"
for n in names:
    print(f"| {n} | " + " | ".join(cell(res[m].get("checks", {}).get(n)) for m in modes) + " |")
for m in modes:
    for n, c in res[m].get("checks", {}).items():
        if c.get("ok") is False:
            print(f"FAIL {m}/{n}: {str(c.get('detail'))[:600]}")
    if "error" in res[m]:
        print(f"FAIL {m}: {res[m]['error']}")
PY
