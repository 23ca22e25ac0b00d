#!/usr/bin/env bash
# Builds the host test suite with sanitizers, runs it, and fuzzes the engine
# with libFuzzer (docs/reliability.md). scripts/test.sh (so CI) runs all of it
# after the plain suite.
#   asan: build-asan, -fsanitize=address,undefined: every host test that runs
#         fragfree code in an instrumented program (ctest -L host, less
#         SANITIZER_EXCLUDE); with clang also engine_fuzz, run for FUZZ_SECONDS
#         from a copy of the seed corpus while the tests run (one core each).
#   tsan: build-tsan, -fsanitize=thread: the host tests that start threads
#         (label threads; fragfree itself starts none, so the single-threaded
#         tests give TSan nothing to find).
# Each tree builds only the targets its tests need (test name = target name),
# at -O1 with line tables and assertions on. Exits non-zero on any build error,
# test failure, sanitizer report or fuzzer crash.
#
# Not run here, by construction: tests that load libfragfree.so into programs
# that are not instrumented (LD_PRELOAD into /bin/true, sh, python; ctypes in
# pytest) — a sanitizer runtime must be the first library of the process — and
# tests that only inspect the binary with nm (no fragfree code runs).
#
# Usage: scripts/sanitizers.sh [asan] [tsan]      (default: both)
# Environment: CC / CXX the compiler (default clang / clang++: half gcc's
# compile time under ASan, and libFuzzer; gcc builds the tests but no fuzzer),
# JOBS the parallelism (default nproc), FUZZ_SECONDS the libFuzzer run (default
# 60; 0: none), FUZZ_ARGS extra libFuzzer arguments (e.g. "-max_len=4096"),
# CTEST_ARGS extra ctest arguments (e.g. "-R stress"),
# SANITIZER_EXCLUDE the tests left out (ctest -E). Prints the time and CPU time
# of each phase.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/deps.sh
ff_install_deps clang libclang-rt-dev  # libclang-rt-dev: the sanitizer runtimes, libFuzzer

suites=("$@")
[ ${#suites[@]} -eq 0 ] && suites=(asan tsan)
jobs="${JOBS:-$(nproc)}"
fuzz_seconds="${FUZZ_SECONDS:-60}"
export CC="${CC:-clang}" CXX="${CXX:-clang++}"
debug_info=-g1
[[ "$CXX" == *clang* ]] && debug_info=-gline-tables-only

# Reports are errors: stop at the first one, with a stack.
# allocator_may_return_null (ASan, TSan): a test that asks for an impossible
# size gets null, not a report.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1:strict_init_order=1:check_initialization_order=1:allocator_may_return_null=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:allocator_may_return_null=1}"

exclude="${SANITIZER_EXCLUDE:-^(preload_.*|python_.*|.*_linkage_test)$}"

# cpu_now: sets $cpu to the CPU time (user + sys, in seconds) of this shell's
# finished children (times must run in this shell, not in a subshell).
times_file=$(mktemp)
fuzz_pid=""
trap 'rm -f "$times_file"; [ -z "$fuzz_pid" ] || kill "$fuzz_pid" 2>/dev/null || true' EXIT
cpu_now() {
  times >"$times_file"
  cpu=$(awk 'NR == 2 { for (i = 1; i <= 2; ++i) { split($i, t, /[ms]/); s += t[1] * 60 + t[2] }
                       printf "%d", s }' "$times_file")
}

# Runs libFuzzer on a copy of the seed corpus (it adds what it finds to its
# first directory) for $fuzz_seconds; crashes go to $1/fuzz/crashes. Run in
# the background: the subshell becomes the fuzzer (exec).
run_fuzzer() {
  local dir=$1 work="$1/fuzz"
  rm -rf "$work"
  mkdir -p "$work/corpus" "$work/crashes"
  cp tests/fuzz/corpus/* "$work/corpus/"
  # shellcheck disable=SC2086
  exec "$dir/bin/engine_fuzz" "$work/corpus" -max_total_time="$fuzz_seconds" \
    -timeout=60 -artifact_prefix="$work/crashes/" -print_final_stats=1 ${FUZZ_ARGS:-}
}

status=0
summary=()
total_start=$SECONDS
for suite in "${suites[@]}"; do
  labels=(-L host)
  case "$suite" in
    asan) sanitize="address,undefined" ;;
    tsan) sanitize="thread"; labels+=(-L threads) ;;
    *) echo "sanitizers.sh: unknown suite '$suite' (asan or tsan)" >&2; exit 2 ;;
  esac
  fuzz=OFF
  [ "$suite" = asan ] && [[ "$CXX" == *clang* ]] && [ "$fuzz_seconds" -gt 0 ] && fuzz=ON
  dir="build-$suite"
  start=$SECONDS
  cpu_now
  cpu_start=$cpu
  echo "=== $suite: configure $dir ($CXX, -fsanitize=$sanitize)"
  cmake -S . -B "$dir" -G Ninja \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 $debug_info" \
        -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 $debug_info" \
        -DFRAGFREE_SANITIZE="$sanitize" \
        -DFRAGFREE_WITH_CUDA=OFF \
        -DFRAGFREE_BUILD_BENCHMARKS=OFF \
        -DFRAGFREE_BUILD_REPLAY=OFF \
        -DFRAGFREE_BUILD_FUZZERS=$fuzz \
        -DFRAGFREE_FUZZ_REPLAY_RANDOM=500 >/dev/null
  # The tests this suite runs, and the targets of the same names.
  mapfile -t tests < <(ctest --test-dir "$dir" -N "${labels[@]}" -E "$exclude" |
                       sed -n 's/^ *Test *#[0-9]*: //p')
  targets=("${tests[@]}")
  [ "$fuzz" = ON ] && targets+=(engine_fuzz)
  known=$(ninja -C "$dir" -t targets all | sed 's/: .*//')
  for t in "${targets[@]}"; do
    if ! grep -qxF "$t" <<<"$known"; then
      echo "=== $suite: no target named like test $t: building everything"
      targets=(all)
      break
    fi
  done
  echo "=== $suite: build ${#targets[@]} targets for ${#tests[@]} tests"
  if ! cmake --build "$dir" -j"$jobs" --target "${targets[@]}"; then
    summary+=("$suite: BUILD FAILED after $((SECONDS - start)) s")
    status=1
    continue
  fi
  built=$SECONDS
  cpu_now
  cpu_built=$cpu
  if [ "$fuzz" = ON ]; then
    echo "=== $suite: libFuzzer, $fuzz_seconds s from the seed corpus, while the tests run"
    run_fuzzer "$dir" >"$dir/fuzz.log" 2>&1 &
    fuzz_pid=$!
  fi
  echo "=== $suite: ctest ${labels[*]} (${#tests[@]} tests)"
  # shellcheck disable=SC2086
  if ctest --test-dir "$dir" "${labels[@]}" -E "$exclude" --output-on-failure \
       -j"$jobs" ${CTEST_ARGS:-}; then
    result="tests passed"
  else
    result="tests FAILED"
    status=1
  fi
  if [ -n "$fuzz_pid" ]; then
    log="$dir/fuzz/log"
    fuzz_rc=0
    wait "$fuzz_pid" || fuzz_rc=$?
    fuzz_pid=""
    if [ "$fuzz_rc" = 0 ]; then
      mv "$dir/fuzz.log" "$log"
      fuzz_result="no crash"
      echo "=== $suite: libFuzzer: $fuzz_result (log: $log)"
      grep -aE '^#[0-9]+.*INITED' "$log" || true       # coverage of the seeds
      grep -aE '^#[0-9]+' "$log" | tail -n 1 || true     # and at the end
      grep -aE '^Done|^stat::' "$log" || true
    else
      mv "$dir/fuzz.log" "$log"
      fuzz_result="CRASHED (the input is in $dir/fuzz/crashes/; docs/reliability.md)"
      status=1
      echo "=== $suite: libFuzzer: $fuzz_result; the end of $log:"
      tail -n 80 "$log"
    fi
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/fuzz/log")
    result+="; libFuzzer ${fuzz_seconds} s: ${execs:-?} executions, $fuzz_result"
  fi
  cpu_now
  times_line="build $((built - start)) s wall, $((cpu_built - cpu_start)) s CPU"
  times_line+="; tests $((SECONDS - built)) s wall, $((cpu - cpu_built)) s CPU"
  summary+=("$suite: $result ($times_line)")
done

echo "=== sanitizers.sh summary ($((SECONDS - total_start)) s in all)"
for line in "${summary[@]}"; do echo "  $line"; done
exit $status
