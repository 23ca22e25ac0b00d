#!/usr/bin/env bash
# Runs torch_cpu_test.py with a real torch: the cached venv that scripts/deps.sh
# (ff_torch_venv) makes, $FRAGFREE_TORCH_VENV or ~/.cache/fragfree/venv-torch.
# Without it, or when its torch does not import, prints
# "skipped: torch not installable (...)" and exits 77 (ctest: skipped).
# Usage: torch_cpu_test.sh LIBFRAGFREE
set -uo pipefail
lib=$(realpath "$1")
venv=${FRAGFREE_TORCH_VENV:-$HOME/.cache/fragfree/venv-torch}
here=$(cd "$(dirname "$0")" && pwd)
if [[ ! -x "$venv/bin/python" || ! -f "$venv/.fragfree-ok" ]]; then
  echo "skipped: torch not installable (no torch venv at $venv; scripts/test.sh makes it)"
  exit 77
fi
if ! why=$("$venv/bin/python" -c 'import torch' 2>&1); then
  echo "skipped: torch not installable (import torch: $(tail -1 <<<"$why"))"
  exit 77
fi
cd "$(mktemp -d)" || exit 1
FRAGFREE_LIBRARY=$lib exec "$venv/bin/python" -m pytest -q -p no:cacheprovider \
  "$here/torch_cpu_test.py"
