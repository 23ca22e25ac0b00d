# Sourced by the tests that need a real torch on the CPU: sets torch_python to
# the interpreter of the cached torch venv that scripts/deps.sh
# (ff_torch_venv) makes ($FRAGFREE_TORCH_VENV, default
# ~/.cache/fragfree/venv-torch), or prints "skipped: torch not installable
# (...)" and exits 77 (ctest: skipped) when there is none or its torch does
# not import.
venv=${FRAGFREE_TORCH_VENV:-$HOME/.cache/fragfree/venv-torch}
if [[ ! -x "$venv/bin/python" || ! -f "$venv/.fragfree-ok" ]]; then
  echo "skipped: torch not installable (no torch venv at $venv; scripts/test.sh makes it)"
  exit 77
fi
if ! why=$("$venv/bin/python" -c 'import torch' 2>&1); then
  echo "skipped: torch not installable (import torch: $(tail -1 <<<"$why"))"
  exit 77
fi
torch_python=$venv/bin/python
