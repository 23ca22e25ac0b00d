#!/usr/bin/env bash
# Installs fragfree's build and test dependencies from Debian packages when they
# are missing (sourced by setup_and_run.sh, test.sh and sanitizers.sh). Nothing
# else is downloaded.
# ff_install_deps [PACKAGE...]: the common packages and the ones named.
ff_install_deps() {
  local pkgs=(cmake ninja-build g++ libabsl-dev libgtest-dev libgmock-dev
              libbenchmark-dev zlib1g-dev libjemalloc-dev python3 python3-pytest
              "$@")
  local missing=()
  for p in "${pkgs[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "fragfree: installing ${missing[*]}" >&2
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get update -qq >/dev/null || true
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

# ff_build [DIR [CMAKE_ARG...]]: configures and builds into DIR (default:
# build). CUDA support is on when the toolkit headers exist (the driver itself is
# loaded at run time, if present).
ff_build() {
  local dir="${1:-build}"
  shift || true
  local cuda=OFF
  [ -f /usr/local/cuda/include/cuda.h ] && cuda=ON
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DFRAGFREE_WITH_CUDA=$cuda "$@" >/dev/null
  cmake --build "$dir" -j"$(nproc)"
}
