#!/usr/bin/env bash
# Runs fragfree's host test suite (everything that needs no GPU): installs what is
# missing, builds, then ctest -L host. CI (.ci/run) runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/deps.sh
ff_install_deps
ff_build build
ctest --test-dir build -L host --output-on-failure -j"$(nproc)"
