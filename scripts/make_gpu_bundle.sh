#!/usr/bin/env bash
# Packs what the GPU machine needs into .carry/gpu (git-ignored): the test and
# benchmark binaries, libfragfree.so and the shared libraries they need that the
# GPU machine lacks (Google Benchmark, GoogleTest; abseil only for a build with
# FRAGFREE_STATIC_ABSEIL=OFF: libfragfree.so itself needs none), found with ldd.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build}"
D=.carry/gpu
rm -rf "$D" && mkdir -p "$D/bin" "$D/lib" "$D/deps"
cp -a "$BUILD"/lib/lib*.so* "$D/lib/"
for f in "$BUILD"/bin/*; do
  case "$(basename "$f")" in *_test|malloc_free_bench|steady_state_bench|mutex_bench|pinned_bench|fragfree-replay|*preload*) cp "$f" "$D/bin/";; esac
done
for f in "$D"/bin/* "$D"/lib/libfragfree.so; do
  ldd "$f" 2>/dev/null | awk '/=> \//{print $3}' | grep -E 'absl|benchmark|gtest|gmock' || true
done | sort -u | xargs -r -I{} cp -L {} "$D/deps/"
strip --strip-debug "$D"/bin/* "$D"/lib/*.so* "$D"/deps/* 2>/dev/null || true
du -sh "$D"
