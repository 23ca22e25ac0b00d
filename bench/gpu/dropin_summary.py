#!/usr/bin/env python3
"""One line per integrations/python/tests/gpu_dropin.py result file: its name,
ok or FAILED, how many checks it ran, and the failed checks (name -> result).
A file whose last line is not the script's JSON is named as unreadable.

    python3 bench/gpu/dropin_summary.py OUT/dropin_*.json
"""
import json
import sys


def summarise(path):
    try:
        with open(path) as f:
            result = json.loads(f.read().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError) as e:
        return "%s unreadable: %s" % (path, e)
    bad = {k: v for k, v in result["checks"].items() if v["ok"] is False}
    return "%s %s %d checks; %s" % (path.rsplit("/", 1)[-1], "ok" if result["ok"] else "FAILED",
                                    len(result["checks"]), bad or "")


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(summarise(p))
