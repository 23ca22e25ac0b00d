"""The CUDA calls of several profiled runs side by side: reads the "API {...}"
lines that bench/gpu/profile_steps.py prints (from the logs named, or stdin)
and prints one markdown table, a row per call name (the ones costing the most
CPU in any run first, then a total row), a column pair per run: calls a step
and CPU microseconds a step. Where one mode spends more time in libcuda than
another, the row that grows names the call that pays it.
  python3 api_calls_table.py [--top 15] LOG...
"""
import argparse
import json
import sys


def read_runs(lines):
    """[(label, {name: [calls a step, µs a step]})] in the order found; a mode
    seen again is labelled MODE-2, MODE-3, ..."""
    runs, seen = [], {}
    for line in lines:
        if not line.startswith("API "):
            continue
        rec = json.loads(line[4:])
        seen[rec["mode"]] = seen.get(rec["mode"], 0) + 1
        label = rec["mode"] if seen[rec["mode"]] == 1 else f"{rec['mode']}-{seen[rec['mode']]}"
        runs.append((label, rec["calls"]))
    return runs


def table(runs, top):
    names = sorted({n for _, calls in runs for n in calls},
                   key=lambda n: -max(calls.get(n, [0, 0])[1] for _, calls in runs))
    head = "| call | " + " | ".join(f"{label} calls | {label} µs" for label, _ in runs) + " |"
    lines = [head, "|---" * (1 + 2 * len(runs)) + "|"]
    for n in names[:top]:
        cells = [calls.get(n, [0, 0]) for _, calls in runs]
        lines.append(f"| {n} | " + " | ".join(f"{c:g} | {us:.1f}" for c, us in cells) + " |")
    totals = [(sum(v[0] for v in calls.values()), sum(v[1] for v in calls.values()))
              for _, calls in runs]
    lines.append("| all | " + " | ".join(f"{c:g} | {us:.1f}" for c, us in totals) + " |")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--top", type=int, default=15)
    p.add_argument("logs", nargs="*")
    args = p.parse_args()
    lines = []
    for path in args.logs or ["-"]:
        with (sys.stdin if path == "-" else open(path)) as f:
            lines.extend(f)
    runs = read_runs(lines)
    if not runs:
        print("no API lines (profile_steps.py --kernel-steps N prints them)")
        return
    print(table(runs, args.top))


if __name__ == "__main__":
    main()
