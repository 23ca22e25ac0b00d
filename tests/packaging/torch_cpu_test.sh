#!/usr/bin/env bash
# Runs torch_cpu_test.py with a real torch: the cached venv that scripts/deps.sh
# (ff_torch_venv) makes, $FRAGFREE_TORCH_VENV or ~/.cache/fragfree/venv-torch.
# Without it, or when its torch does not import, prints
# "skipped: torch not installable (...)" and exits 77 (ctest: skipped).
# Usage: torch_cpu_test.sh LIBFRAGFREE
set -uo pipefail
lib=$(realpath "$1")
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../testing/torch_venv.sh"
cd "$(mktemp -d)" || exit 1
FRAGFREE_LIBRARY=$lib exec "$torch_python" -m pytest -q -p no:cacheprovider \
  "$here/torch_cpu_test.py"
