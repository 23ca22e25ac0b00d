#!/usr/bin/env bash
# Runs the interposer's host tests against the fake CUDA runtime (no GPU):
# preload_host_test under LD_PRELOAD=libfragfree.so with the host backend, the
# one-time notice for each PYTORCH_CUDA_ALLOC_CONF setting, the stats_at_exit
# summary, the OOM report files (oom_report_path) of cudaMalloc/cudaMallocAsync
# and of the C API, and the local-scope runtime lookup (preload_local_test).
# Usage: preload_host_test.sh LIBFRAGFREE HOST_TEST LOCAL_TEST FAKE_EXT
set -uo pipefail
lib=$1
host_test=$2
local_test=$3
fake_ext=$4
failures=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
clean=(env -u LD_PRELOAD -u PYTORCH_CUDA_ALLOC_CONF -u PYTORCH_HIP_ALLOC_CONF
  -u PYTORCH_ALLOC_CONF -u PYTORCH_NO_CUDA_MEMORY_CACHING
  FRAGFREE_CONF=backend:host,host_capacity_mb:64 LD_PRELOAD="$lib")

# The main checks.
if "${clean[@]}" "$host_test" all >"$tmp/out" 2>"$tmp/err"; then
  echo "ok: preload_host_test all"
else
  fail "preload_host_test all:"
  cat "$tmp/out" "$tmp/err"
fi

# run_mode NAME EXTRA_ENV MODE: runs one short mode; stderr in $tmp/err.
run_mode() {
  local name=$1 extra=$2 mode=$3
  # shellcheck disable=SC2086
  "${clean[@]}" $extra "$host_test" "$mode" >"$tmp/out" 2>"$tmp/err" ||
    fail "$name: exit code $?: $(cat "$tmp/err")"
}
expect_stderr() {  # NAME PATTERN COUNT
  local n
  n=$(grep -c -- "$2" "$tmp/err")
  [[ "$n" == "$3" ]] || fail "$1: '$2' appears $n times in stderr, want $3: $(cat "$tmp/err")"
}
expect_quiet() {
  [[ ! -s "$tmp/err" ]] || fail "$1: unexpected stderr: $(cat "$tmp/err")"
}

run_mode "notice, expandable" PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True one
expect_stderr "notice, expandable" "fragfree sees no tensor allocation" 1
run_mode "notice, native" PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128 one
expect_stderr "notice, native" "keeps PyTorch's native caching allocator" 1
run_mode "notice, no caching" \
  "PYTORCH_ALLOC_CONF=backend:native PYTORCH_NO_CUDA_MEMORY_CACHING=1" one
expect_stderr "notice, no caching" "without its stream" 1
run_mode "notice, no caching, ours" PYTORCH_NO_CUDA_MEMORY_CACHING=1 one
expect_stderr "notice, no caching, ours" "has no effect" 1
run_mode "notice, pinned only" PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True pinned
expect_stderr "notice, pinned only" "fragfree sees no tensor allocation" 1
run_mode "no notice without CUDA" PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True none
expect_quiet "no notice without CUDA"
run_mode "no notice for cudaMallocAsync" PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync one
expect_quiet "no notice for cudaMallocAsync"
run_mode "quiet by default" "" one
expect_quiet "quiet by default"

run_mode "stats at exit" FRAGFREE_CONF=backend:host,stats_at_exit:True one
expect_stderr "stats at exit" "fragfree: device 0 (host) at exit" 1
expect_stderr "stats at exit" "U_alloc" 1
expect_stderr "stats at exit" "gap at the peak [0-9.]*%: \(low\|moderate\|severe\) (a gap between allocated and reserved memory above 20% means" 1
expect_stderr "stats at exit" "bucket advice: FRAGFREE_CONF=round_buckets:\[" 1
run_mode "stats at exit, pinned" FRAGFREE_CONF=backend:host,stats_at_exit:True pinned
expect_stderr "stats at exit, pinned" "pinned host memory" 1
run_mode "stats at exit, nothing used" FRAGFREE_CONF=backend:host,stats_at_exit:True none
expect_quiet "stats at exit, nothing used"
echo "ok: notices and exit summary"

# The OOM report in files (oom_report_path) from a plain (non-Python) program:
# check_reports NAME DIR COUNT: COUNT .txt/.json/.html triples in DIR, each
# named on stderr by one "OOM report written to" line, the JSON parses and the
# text starts with PyTorch's headline.
check_reports() {
  local name=$1 dir=$2 want=$3 n base
  expect_stderr "$name" "^fragfree: OOM report written to $dir/fragfree-oom-[0-9]*-[0-9]*\.{txt,json,html}\$" "$want"
  for ext in txt json html; do
    n=$(find "$dir" -name "fragfree-oom-*.$ext" 2>/dev/null | wc -l)
    [[ "$n" == "$want" ]] || fail "$name: $n .$ext reports in $dir, want $want"
  done
  while read -r base; do
    base=${base%.\{txt,json,html\}}
    for ext in txt json html; do
      [[ -s "$base.$ext" ]] || fail "$name: $base.$ext is missing or empty"
    done
    head -c 19 "$base.txt" | grep -q "^CUDA out of memory" ||
      fail "$name: $base.txt does not start with the headline"
    grep -q "</html>" "$base.html" || fail "$name: $base.html is cut short"
    if command -v python3 >/dev/null; then
      python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); assert r["message"].startswith("CUDA out of memory"), r["message"]; assert r["fragmentation"]["gap_verdict"] in ("low", "moderate", "severe")' \
        "$base.json" || fail "$name: $base.json does not parse or lacks the keys"
    fi
  done < <(sed -n 's/^fragfree: OOM report written to //p' "$tmp/err")
}

reports=$tmp/reports/nested  # created by fragfree, parents included
run_mode "oom, preloaded" \
  "FRAGFREE_CONF=backend:host,host_capacity_mb:64,oom_report_path:$reports" oom
# cudaMalloc and the first cudaMallocAsync failure are reported; the immediate
# retry of the same request points at the report instead of writing another.
check_reports "oom, preloaded" "$reports" 2
expect_stderr "oom, preloaded" "out of memory again: the same request" 1
expect_stderr "oom, preloaded" "FF_ERR_OOM: CUDA out of memory. Tried to allocate" 2
# Without oom_report_path the report goes to stderr only.
run_mode "oom, no path" "" oom
expect_stderr "oom, no path" "FF_ERR_OOM: CUDA out of memory. Tried to allocate" 2
expect_stderr "oom, no path" "OOM report written" 0
# A path that cannot be a directory: said, with the reason.
touch "$tmp/a_file"
run_mode "oom, bad path" \
  "FRAGFREE_CONF=backend:host,host_capacity_mb:64,oom_report_path:$tmp/a_file/x" oom
expect_stderr "oom, bad path" "^fragfree: could not write the OOM report (oom_report_path $tmp/a_file/x): .*Not a directory" 2
# The C API in a program that is not preloaded.
capi=$tmp/capi
if env -u LD_PRELOAD "$host_test" capi_oom "$lib" \
    "backend:host,host_capacity_mb:64,oom_report_path:$capi" >"$tmp/out" 2>"$tmp/err"; then
  check_reports "oom, C API" "$capi" 1
else
  fail "capi_oom: $(cat "$tmp/out" "$tmp/err")"
fi
echo "ok: OOM reports"

if "${clean[@]}" "$local_test" "$fake_ext" >"$tmp/out" 2>"$tmp/err"; then
  echo "ok: runtime in a local scope"
else
  fail "preload_local_test: $(cat "$tmp/out" "$tmp/err")"
fi

if ((failures > 0)); then
  echo "$failures failure(s)"
  exit 1
fi
echo "preload_host_test: all checks passed"
