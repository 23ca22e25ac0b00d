#!/usr/bin/env bash
# Builds the host test suite with sanitizers and runs it (docs/reliability.md):
#   build-asan: -DFRAGFREE_SANITIZE=address,undefined, then ctest -L host
#   build-tsan: -DFRAGFREE_SANITIZE=thread,            then ctest -L host
# Only what the host suite needs is built (no benchmarks, no replay tool, no
# CUDA backend). Assertions stay on (-O1 -g without NDEBUG). Exits non-zero on
# any build error, test failure or sanitizer report.
#
# Usage: scripts/sanitizers.sh [asan] [tsan]      (default: both)
# Environment: CC / CXX pick the compiler (default gcc / g++, as CI; clang
# works too), JOBS the parallelism (default nproc), CTEST_ARGS extra ctest
# arguments (e.g. "-R stress"). Prints the time each phase took.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/deps.sh
ff_install_deps

suites=("$@")
[ ${#suites[@]} -eq 0 ] && suites=(asan tsan)
jobs="${JOBS:-$(nproc)}"
export CC="${CC:-gcc}" CXX="${CXX:-g++}"

# Reports are errors: stop at the first one, with a stack.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1:strict_init_order=1:check_initialization_order=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}"

status=0
summary=()
total_start=$SECONDS
for suite in "${suites[@]}"; do
  case "$suite" in
    asan) sanitize="address,undefined" ;;
    tsan) sanitize="thread" ;;
    *) echo "sanitizers.sh: unknown suite '$suite' (asan or tsan)" >&2; exit 2 ;;
  esac
  dir="build-$suite"
  start=$SECONDS
  echo "=== $suite: configure $dir ($CXX, -fsanitize=$sanitize)"
  cmake -S . -B "$dir" -G Ninja \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g" \
        -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
        -DFRAGFREE_SANITIZE="$sanitize" \
        -DFRAGFREE_WITH_CUDA=OFF \
        -DFRAGFREE_BUILD_BENCHMARKS=OFF \
        -DFRAGFREE_BUILD_REPLAY=OFF >/dev/null
  echo "=== $suite: build"
  if ! cmake --build "$dir" -j"$jobs"; then
    summary+=("$suite: BUILD FAILED after $((SECONDS - start)) s")
    status=1
    continue
  fi
  built=$SECONDS
  echo "=== $suite: ctest -L host"
  # shellcheck disable=SC2086
  if ctest --test-dir "$dir" -L host --output-on-failure -j"$jobs" ${CTEST_ARGS:-}; then
    result="passed"
  else
    result="FAILED"
    status=1
  fi
  summary+=("$suite: $result (build $((built - start)) s, tests $((SECONDS - built)) s)")
done

echo "=== sanitizers.sh summary ($((SECONDS - total_start)) s in all)"
for line in "${summary[@]}"; do echo "  $line"; done
exit $status
