#!/usr/bin/env bash
# LD_PRELOAD'ing libfragfree.so into programs that never use CUDA changes
# nothing: same stdout, same exit code, empty stderr. Its only effect is
# PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync in the environment when no
# PyTorch allocator variable is set; a user's setting is left alone, and a
# program that dlopen()s the library (fragfree.enable()) is not affected.
# A library built without CUDA has no LD_PRELOAD layer and sets nothing.
# Usage: harmless_test.sh LIBFRAGFREE PLAIN_PROGRAM [WITH_CUDA (1, default, or 0)]
set -uo pipefail
lib=$1
plain=$2
with_cuda=${3:-1}
# What the preload sets when the user set nothing.
if [[ $with_cuda == 1 ]]; then
  preload_sets=backend:cudaMallocAsync
  preload_sets_empty=backend:cudaMallocAsync
else
  preload_sets="(unset)"
  preload_sets_empty=""
fi
failures=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# Clean environment for every run: no PyTorch allocator variables, no
# inherited LD_PRELOAD.
clean=(env -u LD_PRELOAD -u PYTORCH_CUDA_ALLOC_CONF -u PYTORCH_HIP_ALLOC_CONF
  -u PYTORCH_ALLOC_CONF -u PYTORCH_NO_CUDA_MEMORY_CACHING -u FRAGFREE_CONF)

# same_behaviour NAME CMD...: compares a run without and with the preload.
same_behaviour() {
  local name=$1
  shift
  "${clean[@]}" "$@" >"$tmp/out0" 2>"$tmp/err0"
  local rc0=$?
  "${clean[@]}" LD_PRELOAD="$lib" "$@" >"$tmp/out1" 2>"$tmp/err1"
  local rc1=$?
  [[ $rc0 == "$rc1" ]] || fail "$name: exit code $rc0 without, $rc1 with LD_PRELOAD"
  [[ $rc1 == 0 ]] || fail "$name: exit code $rc1"
  cmp -s "$tmp/out0" "$tmp/out1" || fail "$name: stdout differs"
  if [[ -s "$tmp/err1" ]]; then
    fail "$name: stderr with LD_PRELOAD: $(cat "$tmp/err1")"
  fi
  # Also with fragfree's own settings that act at exit.
  "${clean[@]}" LD_PRELOAD="$lib" FRAGFREE_CONF=stats_at_exit:True "$@" \
    >"$tmp/out2" 2>"$tmp/err2"
  [[ $? == 0 && ! -s "$tmp/err2" ]] ||
    fail "$name: stats_at_exit run: $(cat "$tmp/err2")"
  "${clean[@]}" LD_PRELOAD="$lib" FRAGFREE_CONF=no_such_key:1 "$@" \
    >"$tmp/out3" 2>"$tmp/err3"
  [[ $? == 0 && ! -s "$tmp/err3" ]] ||
    fail "$name: run with a bad FRAGFREE_CONF: $(cat "$tmp/err3")"
  echo "ok: $name"
}

same_behaviour "/bin/true" /bin/true
same_behaviour "plain C program" "$plain"
# A fork in a fork: the preload's fork handlers must leave the child's locks
# usable (they once hung the second fork).
same_behaviour "fork chain" timeout 20 "$plain" --fork-chain 3
same_behaviour "/bin/sh -c" /bin/sh -c 'echo shell; ls / >/dev/null'
if [[ -x /usr/bin/python3 ]]; then
  same_behaviour "python3 -c print(1)" /usr/bin/python3 -c 'print(1)'
else
  echo "skip: /usr/bin/python3 not found"
fi

# expect_env NAME WANT CMD...: PYTORCH_CUDA_ALLOC_CONF as the plain program
# run by CMD... (its arguments included) sees it.
expect_env() {
  local name=$1 want=$2
  shift 2
  local got
  got=$("$@" --getenv PYTORCH_CUDA_ALLOC_CONF 2>"$tmp/err" | head -1)
  [[ "$got" == "PYTORCH_CUDA_ALLOC_CONF=$want" ]] ||
    fail "$name: got '$got', want PYTORCH_CUDA_ALLOC_CONF=$want"
  [[ ! -s "$tmp/err" ]] || fail "$name: stderr: $(cat "$tmp/err")"
  echo "ok: $name"
}
expect_env "unset -> set" "$preload_sets" \
  "${clean[@]}" LD_PRELOAD="$lib" "$plain"
expect_env "empty -> set" "$preload_sets_empty" \
  "${clean[@]}" LD_PRELOAD="$lib" PYTORCH_CUDA_ALLOC_CONF= "$plain"
expect_env "user setting kept" expandable_segments:True \
  "${clean[@]}" LD_PRELOAD="$lib" PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
  "$plain"
expect_env "user backend:native kept" backend:native \
  "${clean[@]}" LD_PRELOAD="$lib" PYTORCH_CUDA_ALLOC_CONF=backend:native "$plain"
expect_env "PYTORCH_ALLOC_CONF respected" "(unset)" \
  "${clean[@]}" LD_PRELOAD="$lib" PYTORCH_ALLOC_CONF=max_split_size_mb:64 "$plain"
expect_env "LD_PRELOAD among others" "$preload_sets" \
  "${clean[@]}" LD_PRELOAD="libm.so.6 $lib" "$plain"
expect_env "dlopen is not preload" "(unset)" \
  "${clean[@]}" "$plain" --dlopen "$lib"
expect_env "not preloaded" "(unset)" "${clean[@]}" "$plain"

# Children inherit the setting (the constructor ran in the parent).
got=$("${clean[@]}" LD_PRELOAD="$lib" /bin/sh -c \
  'env -u LD_PRELOAD /usr/bin/env' 2>"$tmp/err" | grep '^PYTORCH_CUDA_ALLOC_CONF=')
want=""
[[ $with_cuda == 1 ]] && want="PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync"
[[ "$got" == "$want" ]] ||
  fail "child environment: got '$got'"
[[ ! -s "$tmp/err" ]] || fail "child environment: stderr: $(cat "$tmp/err")"
echo "ok: child environment"

if ((failures > 0)); then
  echo "$failures failure(s)"
  exit 1
fi
echo "harmless_test: all checks passed"
