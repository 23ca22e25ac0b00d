#!/usr/bin/env bash
# The export check must catch leaks: check_exports.sh, run on a library that
# exports abseil, jemalloc and torch names (leaky.c) against fragfree's
# expected lists, fails and names each forbidden symbol; run on libfragfree.so
# it passes.
# Usage: exports_selftest.sh NM CHECK_EXPORTS LEAKY_LIB LIBFRAGFREE
set -uo pipefail
nm_tool=$1 check=$2 leaky=$3 lib=$4
dir=$(cd "$(dirname "$check")" && pwd)
expected=("$dir/expected_exports.txt")
exports=$("$nm_tool" -D --defined-only "$lib")
if grep -q ' cudaMalloc$' <<<"$exports"; then
  expected+=("$dir/expected_exports_cuda.txt")
fi
out=$(bash "$check" "$nm_tool" "$leaky" "${expected[@]}" 2>&1)
rc=$?
echo "$out"
fail=0
[[ $rc != 0 ]] || { echo "FAIL: check_exports.sh accepted a library exporting abseil/jemalloc/torch names"; fail=1; }
for name in _ZN4absl7debian36StrCatERKNS0_8AlphaNumES3_ je_mallocx ffje_malloc _ZN3c1019GetCPUAllocatorEv; do
  grep -q "forbidden.*$name" <<<"$out" || { echo "FAIL: $name not reported as forbidden"; fail=1; }
done
bash "$check" "$nm_tool" "$lib" "${expected[@]}" || { echo "FAIL: libfragfree.so rejected"; fail=1; }
((fail == 0)) && echo "exports selftest ok"
exit $fail
