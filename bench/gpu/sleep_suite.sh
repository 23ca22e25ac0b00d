#!/usr/bin/env bash
# Sleep and wake on a GPU, every check and benchmark in one run (docs/sleep.md):
#   1. bench/gpu/vmm_calls.py            what each CUDA VMM call costs per page
#   2. bench/gpu/sleep_wake.py           1/10/40 GiB, with and without a CPU
#                                        backup, --cycles 3 (native mode)
#   3. bench/gpu/sleep_wake.py           10 GiB under LD_PRELOAD=LIB
#   4. bench/gpu/sleep_checks.py         torch.compile + single-rank NCCL
#   5. bench/gpu/sleep_demo.py           native mode
#   6. bench/gpu/sleep_demo.py           under LD_PRELOAD=LIB
# Logs go to $OUT/sleep_suite/ (OUT defaults to a new temporary folder); a
# short table is printed at the end. Exits 1 when a step fails.
# Usage: bench/gpu/sleep_suite.sh LIB   (LIB: path of libfragfree.so)
# Environment: PYTHON (default python3), SIZES (default 1,10,40).
set -uo pipefail
if [[ $# -lt 1 || ! -f "$1" ]]; then
  echo "usage: $0 /path/to/libfragfree.so" >&2
  exit 2
fi
lib=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")  # as named: LD_PRELOAD sees it
repo=$(cd "$(dirname "$0")/../.." && pwd)
py=${PYTHON:-python3}
out=${OUT:-$(mktemp -d)}/sleep_suite
mkdir -p "$out"
cd "$repo" || exit 1
export PYTHONPATH="$repo/integrations/python${PYTHONPATH:+:$PYTHONPATH}"
export FRAGFREE_LIBRARY="$lib"

status=0
# step NAME LIMIT_S CMD...: runs CMD with its output in $out/NAME.log.
step() {
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc $((SECONDS - t0))s" | tee -a "$out/steps.txt"
  [[ $rc -eq 0 ]] || status=1
}

: >"$out/steps.txt"
step vmm_calls 120 "$py" bench/gpu/vmm_calls.py --pages 2048 --threads 4
step sleep_wake_native 420 "$py" bench/gpu/sleep_wake.py --sizes "${SIZES:-1,10,40}" --cycles 3
step sleep_wake_preload 240 env LD_PRELOAD="$lib" "$py" bench/gpu/sleep_wake.py --sizes 10 --cycles 3
step sleep_checks 300 "$py" bench/gpu/sleep_checks.py
step demo_native 300 "$py" bench/gpu/sleep_demo.py --mode native
step demo_preload 300 env LD_PRELOAD="$lib" "$py" bench/gpu/sleep_demo.py

echo
echo "== sleep suite: $lib (logs: $out)"
"$py" - "$out" <<'EOF'
import json, os, sys

out = sys.argv[1]


def last_json(name):
    try:
        lines = open(os.path.join(out, name + ".log")).read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


steps = dict(l.split(" ", 1) for l in open(os.path.join(out, "steps.txt")).read().splitlines())
v = last_json("vmm_calls")
if v:
    us = v["us_per_page"]
    print("VMM calls, us per 2 MiB page: " + ", ".join(
        f"{k} {'refused' if x is None else f'{x:.1f}'}" for k, x in us.items()))
print(f"{'run':<18} {'GiB':>4} {'backup':>6} {'cycle':>6} {'pause s':>8} {'resume s':>8} "
      f"{'eff GB/s':>8} {'checks':>6}")
for name in ("sleep_wake_native", "sleep_wake_preload"):
    j = last_json(name)
    if not j:
        print(f"{name:<18} no result ({steps.get(name, 'not run')})")
        continue
    for r in j["rows"]:
        ok = r["same_addresses"] and r["freed_ge_footprint"] and r["contents_ok"] is not False \
            and r["graph_replay_ok"] is not False
        for label, c in (("first", r), ("steady", r.get("steady"))):
            if not c:
                continue
            eff = c.get("effective_GBps")
            print(f"{name:<18} {r['total_GiB']:>4.0f} {r['backup']:>6} "
                  f"{'' if r['backup'] == 'none' else label:>6} {c['pause_s']:>8.3f} "
                  f"{c['resume_s']:>8.3f} {'-' if eff is None else f'{eff:.1f}':>8} "
                  f"{'ok' if ok else 'FAIL':>6}")
            ph = c.get("phases")
            if ph:
                p, q = ph["pause"], ph["resume"]
                print(f"{'':>19}pause: wait {p['wait_users_s']:.3f}, backup {p['backup_issue_s']:.3f}, "
                      f"copy wait {p['copy_wait_s']:.3f}, unmap {p['unmap_s']:.3f} "
                      f"({p['unmap_calls']} calls), release {p['release_s']:.3f} | resume: map "
                      f"{q['map_s']:.3f} ({q['map_ranges']} ranges), copy issue "
                      f"{q['copy_issue_s']:.3f}, copy wait {q['copy_wait_s']:.3f}, free "
                      f"{q['backup_free_s']:.3f}")
    t = j["targets"]
    print(f"{name:<18} targets: steady >= 40 GB/s: {t.get('steady_effective_ge_40GBps')}, "
          f"resume without backup <= 0.25 s/10 GiB: {t.get('resume_no_backup_le_0.25s_per_10GiB')}")
c = last_json("sleep_checks")
print(f"{'sleep_checks':<18} " + (json.dumps(c) if c else f"no result ({steps.get('sleep_checks')})"))
for name in ("demo_native", "demo_preload"):
    d = last_json(name)
    if not d:
        print(f"{name:<18} no result ({steps.get(name, 'not run')})")
        continue
    print(f"{name:<18} {'PASS' if d['ok'] else 'FAIL'}: fragfree {d['fragfree_mode']}, "
          f"freed {d['freed_GiB']:.2f} of {d['footprint_GiB']:.2f} GiB, pause {d['pause_s']:.3f} s, "
          f"resume {d['resume_s']:.3f} s, {d['steps']} losses max abs diff "
          f"{d['max_abs_loss_diff']:g}, params identical {d['params_identical']}")
print("steps: " + ", ".join(f"{k} {v}" for k, v in steps.items()))
EOF
echo "RESULT: $([[ $status -eq 0 ]] && echo PASS || echo FAIL)"
exit $status
