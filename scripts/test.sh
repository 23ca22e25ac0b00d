#!/usr/bin/env bash
# Runs fragfree's host test suite (everything that needs no GPU): installs what is
# missing (Debian packages, abseil's source for the static PIC build, and a
# cached venv with a real torch for the Python tests on the CPU: ff_torch_venv,
# skipped with a line when torch cannot be installed), builds build/, runs
# ctest -L host, then scripts/sanitizers.sh (the suite under ASan+UBSan and TSan,
# and a libFuzzer run of FUZZ_SECONDS, default 60).
# CI (.ci/run) runs exactly this. --no-sanitizers: the plain suite only.
set -euo pipefail
cd "$(dirname "$0")/.."
sanitizers=1
for arg in "$@"; do
  case "$arg" in
    --no-sanitizers) sanitizers=0 ;;
    *) echo "usage: scripts/test.sh [--no-sanitizers]" >&2; exit 2 ;;
  esac
done
start=$SECONDS
. scripts/deps.sh
ff_install_deps
torch_start=$SECONDS
ff_torch_venv || true
echo "=== test.sh: torch venv: $((SECONDS - torch_start)) s"
# In CI (CI=true) line tables only: stack traces keep file:line, and the build
# takes a quarter less CPU than with full debug info.
build_args=()
if [ "${CI:-}" = true ]; then
  build_args=(-DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG"
              -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG")
fi
ff_build build "${build_args[@]}"
ctest --test-dir build -L host --output-on-failure -j"$(nproc)"
echo "=== test.sh: plain build and suite: $((SECONDS - start)) s"
if [ "$sanitizers" = 1 ]; then
  ./scripts/sanitizers.sh
fi
echo "=== test.sh: all done in $((SECONDS - start)) s"
