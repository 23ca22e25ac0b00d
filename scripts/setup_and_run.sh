#!/usr/bin/env bash
# The main job: on a fresh machine, install what is missing, build fragfree, and
# replay a real PyTorch training trace (GPT-2, variable sequence length, recorded on
# an H200) through PyTorch's default allocator, expandable segments and fragfree,
# printing the comparison and writing build/report.html. No GPU needed: fragfree
# runs on its simulated backend here. Pass other traces as arguments.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/deps.sh
ff_install_deps
ff_build build
traces=("$@")
[ ${#traces[@]} -gt 0 ] || traces=(data/traces/*.csv.gz data/traces/patterns/*.csv.gz)
./build/bin/fragfree-replay --html build/report.html "${traces[@]}"
echo "report: $(pwd)/build/report.html"
