#!/usr/bin/env bash
# Builds the host test suite with sanitizers and runs it (docs/reliability.md):
#   build-asan: -DFRAGFREE_SANITIZE=address,undefined, then ctest -L host
#   build-tsan: -DFRAGFREE_SANITIZE=thread,            then ctest -L host
# Only what the host suite needs is built (no benchmarks, no replay tool, no
# CUDA backend). Assertions stay on (-O1 -g without NDEBUG). Exits non-zero on
# any build error, test failure or sanitizer report.
#
# Not run here, by construction: tests that load libfragfree.so into programs
# that are not instrumented (LD_PRELOAD into /bin/true, sh, python; ctypes in
# pytest) — a sanitizer runtime must be the first library of the process — and
# tests that only inspect the binary with nm (no fragfree code runs). The
# SANITIZER_EXCLUDE regex lists them. Under TSan the conformance suite is left
# out too: it is single-threaded (nothing for TSan to find) and takes ~260 s
# there, close to its 300 s timeout; ASan runs it.
#
# Usage: scripts/sanitizers.sh [asan] [tsan]      (default: both)
# Environment: CC / CXX pick the compiler (default gcc / g++, as CI: with clang
# libfragfree.so's -Wl,--no-undefined link fails, as clang leaves the ASan
# runtime out of shared libraries), JOBS the parallelism (default nproc),
# CTEST_ARGS extra ctest arguments (e.g. "-R stress"), SANITIZER_EXCLUDE the
# tests left out (ctest -E). Prints the time each phase took.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/deps.sh
ff_install_deps

suites=("$@")
[ ${#suites[@]} -eq 0 ] && suites=(asan tsan)
jobs="${JOBS:-$(nproc)}"
export CC="${CC:-gcc}" CXX="${CXX:-g++}"

# Reports are errors: stop at the first one, with a stack.
# allocator_may_return_null (ASan, TSan): metadata_fallback_test checks that a huge
# new(std::nothrow) returns null.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1:strict_init_order=1:check_initialization_order=1:allocator_may_return_null=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:allocator_may_return_null=1}"

exclude="${SANITIZER_EXCLUDE:-^(preload_.*|python_.*|.*_linkage_test)$}"

status=0
summary=()
total_start=$SECONDS
for suite in "${suites[@]}"; do
  case "$suite" in
    asan) sanitize="address,undefined"; suite_exclude="$exclude" ;;
    tsan) sanitize="thread"; suite_exclude="$exclude|^conformance_host_test\$" ;;
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
        -DFRAGFREE_BUILD_REPLAY=OFF \
        -DFRAGFREE_FUZZ_REPLAY_RANDOM=500 >/dev/null
  echo "=== $suite: build"
  if ! cmake --build "$dir" -j"$jobs"; then
    summary+=("$suite: BUILD FAILED after $((SECONDS - start)) s")
    status=1
    continue
  fi
  built=$SECONDS
  echo "=== $suite: ctest -L host"
  # shellcheck disable=SC2086
  if ctest --test-dir "$dir" -L host -E "$suite_exclude" --output-on-failure \
       -j"$jobs" ${CTEST_ARGS:-}; then
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
