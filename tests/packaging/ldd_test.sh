#!/usr/bin/env bash
# libfragfree.so's run-time dependencies (DT_NEEDED, and what ldd resolves) are
# only the C and C++ runtimes: abseil is linked statically and privately
# (cmake/FragfreeDeps.cmake), jemalloc is not used, torch never linked.
# Usage: ldd_test.sh LIBFRAGFREE
set -euo pipefail
lib=$1
allowed='^(linux-vdso\.so\.1|/lib64/ld-linux-x86-64\.so\.2|ld-linux-x86-64\.so\.2|libc\.so\.6|libm\.so\.6|libstdc\+\+\.so\.6|libgcc_s\.so\.1|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1)$'
fail=0
needed=$(readelf -dW "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
echo "DT_NEEDED: $(echo $needed)"
for n in $needed; do
  [[ "$n" =~ $allowed ]] || { echo "FAIL: libfragfree.so needs $n"; fail=1; }
done
deps=$(ldd "$lib" | awk '{print $1}')
for d in $deps; do
  [[ "$d" =~ $allowed ]] || { echo "FAIL: ldd lists $d"; fail=1; }
done
resolved=$(ldd "$lib")
if grep -q "not found" <<<"$resolved"; then
  echo "FAIL: unresolved: $(grep 'not found' <<<"$resolved")"
  fail=1
fi
if ((fail)); then
  echo "libfragfree.so must need only the C/C++ runtimes; an abseil .so here means the"
  echo "build fell back to the shared abseil (FRAGFREE_STATIC_ABSEIL=OFF, or abseil's source"
  echo "was missing: '. scripts/deps.sh && ff_install_deps', then reconfigure)."
  exit 1
fi
echo "ldd ok: $(echo $deps)"
