#!/usr/bin/env bash
# libfragfree.so alone is enough: the file copied by itself into an empty
# folder, used from a clean environment (env -i: no LD_LIBRARY_PATH, no
# FRAGFREE_*), is dlopened by a C program that allocates and frees on the host
# backend, and passes the harmless-preload checks (tests/preload/harmless_test.sh:
# /bin/true, a C program, python3, ... under LD_PRELOAD of the copy).
# Usage: copied_alone_test.sh LIBFRAGFREE DLOPEN_PROG HARMLESS_SH PLAIN_PROG WITH_CUDA
set -euo pipefail
lib=$1 prog=$2 harmless=$3 plain=$4 with_cuda=$5
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/alone" "$tmp/bin"
cp -L "$lib" "$tmp/alone/libfragfree.so"
cp "$prog" "$plain" "$tmp/bin/"
[[ $(ls "$tmp/alone") == libfragfree.so ]] || { echo "FAIL: folder not alone"; exit 1; }
clean=(env -i PATH=/usr/bin:/bin HOME="$tmp")
out=$("${clean[@]}" FRAGFREE_CONF=backend:host "$tmp/bin/$(basename "$prog")" \
  "$tmp/alone/libfragfree.so" 2>&1) || { echo "FAIL: dlopen + ff_malloc/ff_free: $out"; exit 1; }
[[ "$out" == ok* ]] || { echo "FAIL: unexpected output: $out"; exit 1; }
echo "dlopen of the lone copy: $out"
"${clean[@]}" bash "$harmless" "$tmp/alone/libfragfree.so" \
  "$tmp/bin/$(basename "$plain")" "$with_cuda"
echo "copied alone ok"
