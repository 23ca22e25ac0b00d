#!/usr/bin/env bash
# Runs bench/gpu/sleep_demo.py on the CPU (--device cpu: the library on its
# host backend) with a real torch, the cached venv that scripts/deps.sh
# (ff_torch_venv) makes: the demo's training, pause/resume calls, inference
# and comparison with the reference run work, and its losses and parameters
# come out bitwise equal. Without the venv, or when its torch does not
# import, prints "skipped: torch not installable (...)" and exits 77.
# Usage: sleep_demo_cpu_test.sh LIBFRAGFREE
set -uo pipefail
lib=$(realpath "$1")
repo=$(cd "$(dirname "$0")/../.." && pwd)
. "$repo/tests/testing/torch_venv.sh"
cd "$(mktemp -d)" || exit 1
FRAGFREE_LIBRARY=$lib PYTHONPATH="$repo/integrations/python" exec "$torch_python" \
  "$repo/bench/gpu/sleep_demo.py" --device cpu --steps-before 3 --steps-after 3 --new-tokens 4
