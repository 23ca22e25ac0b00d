#!/usr/bin/env bash
# C/C++ consumers of an installed fragfree: cmake --install (component
# "fragfree") into a temporary prefix; the installed files name no abseil; the
# consumer project (consumer/) configures and builds against the prefix with
# find_package(fragfree), and main.c builds again with only pkg-config's flags;
# both run on the host backend.
# Usage: consumer_test.sh CMAKE BUILD_DIR CONSUMER_SRC CC MAKE_PROGRAM
set -euo pipefail
cmake_cmd=$1 build=$2 src=$3 cc=$4 make_program=$5
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
prefix=$tmp/prefix
"$cmake_cmd" --install "$build" --prefix "$prefix" --component fragfree >"$tmp/install.log" ||
  { cat "$tmp/install.log"; fail "cmake --install"; }
libdir=$(dirname "$(find "$prefix" -name 'libfragfree.so' | head -1)")
[[ -f "$libdir/libfragfree.so" ]] || fail "no libfragfree.so under $prefix"
for f in "$prefix/include/fragfree/fragfree.h" "$libdir/pkgconfig/fragfree.pc" \
         "$libdir/cmake/fragfree/fragfree-config.cmake"; do
  [[ -f "$f" ]] || fail "not installed: $f"
done
if grep -rlI absl "$libdir/cmake" "$libdir/pkgconfig" "$prefix/include"; then
  fail "the installed package names abseil (it is private to libfragfree.so)"
fi
echo "installed: $(cd "$prefix" && find . -type f -o -type l | sort | tr '\n' ' ')"

export FRAGFREE_CONF=backend:host
# find_package
"$cmake_cmd" -S "$src" -B "$tmp/cmake-build" -G Ninja -DCMAKE_MAKE_PROGRAM="$make_program" \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/configure.log" 2>&1 ||
  { cat "$tmp/configure.log"; fail "configuring the consumer with find_package"; }
"$cmake_cmd" --build "$tmp/cmake-build" >"$tmp/build.log" 2>&1 ||
  { cat "$tmp/build.log"; fail "building the consumer (find_package)"; }
if grep -q absl "$tmp/cmake-build/build.ninja"; then
  fail "the consumer's link line names abseil"
fi
out=$("$tmp/cmake-build/consumer") || fail "consumer (find_package) failed: $out"
echo "find_package: $out"
[[ "$out" == "consumer ok"* ]] || fail "unexpected output"

# pkg-config
command -v pkg-config >/dev/null || fail "pkg-config not installed (scripts/deps.sh installs it)"
flags=$(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags --libs fragfree) ||
  fail "pkg-config --cflags --libs fragfree"
echo "pkg-config: $flags"
# shellcheck disable=SC2086
"$cc" "$src/main.c" $flags -o "$tmp/consumer-pc" || fail "building with pkg-config's flags"
out=$(LD_LIBRARY_PATH="$libdir" "$tmp/consumer-pc") || fail "consumer (pkg-config) failed: $out"
echo "pkg-config: $out"
[[ "$out" == "consumer ok"* ]] || fail "unexpected output"
echo "consumer ok both ways"
