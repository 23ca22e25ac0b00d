#!/usr/bin/env bash
# Installs fragfree's build and test dependencies from Debian packages when they
# are missing (sourced by setup_and_run.sh, test.sh and sanitizers.sh), unpacks
# the source of Debian's abseil (ff_abseil_source), which the build compiles
# position-independent to link it into libfragfree.so (cmake/FragfreeDeps.cmake),
# and, for test.sh, makes a cached venv with a real torch from PyPI
# (ff_torch_venv). Nothing else is downloaded.
# ff_install_deps [PACKAGE...]: the common packages and the ones named.
ff_install_deps() {
  local pkgs=(cmake ninja-build g++ libabsl-dev libgtest-dev libgmock-dev
              libbenchmark-dev zlib1g-dev python3 python3-pytest python3-venv
              python3-setuptools python3-wheel dpkg-dev pkg-config "$@")
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
  ff_abseil_source
}

# ff_abseil_source: ~/.cache/fragfree/src/abseil-<version>, the source package
# of the installed libabsl-dev (Debian's patches applied), fetched once with
# apt-get source through a private source list (the system's apt configuration
# is not touched). Where the CMake build finds it (FRAGFREE_ABSEIL_SOURCE_DIR).
# Tries twice; on failure it says so and returns 0: the build then links the
# shared abseil and packaging_ldd_test reports it.
ff_abseil_source() {
  local version
  version=$(dpkg-query -W -f='${source:Version}' libabsl-dev 2>/dev/null) || return 0
  local dest="$HOME/.cache/fragfree/src/abseil-$version"
  [ -f "$dest/absl/base/config.h" ] && return 0
  local tmp
  tmp=$(mktemp -d)
  mkdir -p "$tmp/lists/partial" "$tmp/src"
  # shellcheck disable=SC1091
  local codename
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
  cat >"$tmp/sources.list" <<LIST
deb-src http://deb.debian.org/debian $codename main
deb-src http://deb.debian.org/debian $codename-updates main
deb-src http://deb.debian.org/debian-security $codename-security main
LIST
  local apt=(apt-get -q -o "Dir::Etc::SourceList=$tmp/sources.list"
             -o Dir::Etc::SourceParts=/dev/null -o "Dir::State::Lists=$tmp/lists"
             -o APT::Sandbox::User=root)
  local ok=0
  for attempt in 1 2; do
    if "${apt[@]}" update >"$tmp/log" 2>&1 &&
       (cd "$tmp/src" && "${apt[@]}" source "abseil=$version" >>"$tmp/log" 2>&1); then
      ok=1
      break
    fi
    sleep $((attempt * 5))
  done
  local unpacked
  unpacked=$(find "$tmp/src" -maxdepth 1 -mindepth 1 -type d -name 'abseil-*' | head -1)
  if [ "$ok" = 1 ] && [ -n "$unpacked" ] && [ -f "$unpacked/absl/base/config.h" ]; then
    mkdir -p "$(dirname "$dest")"
    rm -rf "$dest"
    mv "$unpacked" "$dest"
    echo "fragfree: abseil $version source in $dest" >&2
  else
    echo "fragfree: could not fetch abseil's source ($version); libfragfree.so will link" \
         "the shared abseil. Log: $(tail -3 "$tmp/log" | tr '\n' ' ')" >&2
  fi
  rm -rf "$tmp"
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

# ff_torch_venv: a venv with a real torch for the Python tests on the CPU
# (tests/packaging/torch_cpu_test.sh), cached in $FRAGFREE_TORCH_VENV (default
# ~/.cache/fragfree/venv-torch; pip's own cache is kept). Only PyPI is
# reachable here, and its Linux torch is the CUDA build, whose dependencies
# are ~3 GB of NVIDIA wheels. The smallest set that imports on this machine:
# torch itself with --no-deps (539 MB), its small pure-Python dependencies, and
# the four NVIDIA libraries the CUDA toolkit in /usr/local/cuda lacks or has
# too old (NCCL, cuSPARSELt, NVSHMEM, cuFile: 520 MB); the rest (cudart,
# cuBLAS, cuDNN, ...) resolve from /usr/local/cuda. The pins move together
# with torch's (its METADATA's Requires-Dist). Never fails: on any error it
# prints "skipped: torch not installable (<why>)" and returns 1; the test is
# then skipped. FRAGFREE_TORCH=0 skips it.
FF_TORCH_PINS=(torch==2.15.0 nvidia-nccl-cu13==2.30.7 nvidia-cusparselt-cu13==0.8.1
               nvidia-nvshmem-cu13==3.7.2 "nvidia-cufile==1.17.1.22")
FF_TORCH_DEPS=(filelock typing-extensions "sympy>=1.13.3" networkx jinja2 fsspec pytest)
ff_torch_venv() {
  local venv=${FRAGFREE_TORCH_VENV:-$HOME/.cache/fragfree/venv-torch}
  local stamp="$venv/.fragfree-ok"
  local want="${FF_TORCH_PINS[*]} ${FF_TORCH_DEPS[*]}"
  if [ "${FRAGFREE_TORCH:-1}" = 0 ]; then
    echo "skipped: torch not installable (FRAGFREE_TORCH=0)"
    return 1
  fi
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$venv/bin/python" ]; then
    return 0
  fi
  local py=/usr/bin/python3
  [ -x "$py" ] || py=python3
  local log
  log=$(mktemp)
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  local pip=("$venv/bin/python" -m pip --disable-pip-version-check -q --timeout 60 --retries 3)
  if "$py" -m venv "$venv" >"$log" 2>&1 &&
     "${pip[@]}" install --no-deps "${FF_TORCH_PINS[@]}" >>"$log" 2>&1 &&
     "${pip[@]}" install "${FF_TORCH_DEPS[@]}" >>"$log" 2>&1 &&
     "$venv/bin/python" -c 'import torch, torch.cuda._memory_viz' >>"$log" 2>&1; then
    echo "$want" >"$stamp"
    rm -f "$log"
    return 0
  fi
  echo "skipped: torch not installable ($(grep -v '^\s*$' "$log" | tail -1 | cut -c1-200))"
  rm -rf "$venv" "$log"
  return 1
}
