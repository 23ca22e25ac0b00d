#!/usr/bin/env bash
# How fragfree links jemalloc (docs/host.md, "Linking jemalloc"):
#  1. libff_jemalloc.so exports exactly ff_jemalloc_api and defines no
#     standard allocation function (malloc, free, operator new, ...), not even
#     a local one, so nothing can bind to it by name;
#  2. libfragfree.so contains no jemalloc code, does not depend on the
#     companion, defines no allocation function and needs no static TLS, so it
#     still dlopens (ctypes, torch's CUDAPluggableAllocator);
#  3. dlopened, fragfree works and says why metadata is on its mmap arena
#     (not jemalloc); with the companion loaded at start (LD_PRELOAD) metadata
#     is on jemalloc, and the program's malloc stays glibc's.
# Usage: linkage_test.sh NM LIBFRAGFREE LIBCOMPANION
set -euo pipefail
nm_tool=$1 lib=$2 companion=$3
fail() { echo "FAIL: $*"; exit 1; }
alloc_re='^(malloc|free|calloc|realloc|posix_memalign|aligned_alloc|memalign|valloc|pvalloc|malloc_usable_size|mallocx|dallocx|mallctl|_Zn[wa].*|_Zd[la].*)$'

exports=$("$nm_tool" -D --defined-only "$companion" | awk 'NF{print $NF}' | sort -u)
[[ "$exports" == "ff_jemalloc_api" ]] || fail "companion exports: $exports"
defined=$("$nm_tool" --defined-only "$companion" 2>/dev/null | awk 'NF{print $NF}' |
  grep -E "$alloc_re" || true)
[[ -z "$defined" ]] || fail "companion defines: $defined"
undefined=$("$nm_tool" -D -u "$companion" | awk '{print $NF}' | sed 's/@.*//' |
  grep -E "$alloc_re" || true)
[[ -z "$undefined" ]] || fail "companion calls the program's allocator: $undefined"
echo "companion ok: exports ff_jemalloc_api only, no allocation symbol"

jem=$("$nm_tool" "$lib" 2>/dev/null | awk 'NF{print $NF}' | grep -E '^(ffje_|je_)' | head -3 || true)
[[ -z "$jem" ]] || fail "libfragfree.so contains jemalloc symbols: $jem"
defined=$("$nm_tool" --defined-only "$lib" 2>/dev/null | awk 'NF{print $NF}' |
  grep -E '^(malloc|free|calloc|realloc|posix_memalign|aligned_alloc|memalign|valloc)$' || true)
[[ -z "$defined" ]] || fail "libfragfree.so defines: $defined"
if readelf -d "$lib" | grep -q STATIC_TLS; then fail "libfragfree.so needs static TLS"; fi
if readelf -d "$lib" | grep -q fragfree_jemalloc; then fail "libfragfree.so depends on the companion"; fi
echo "libfragfree.so ok: no jemalloc inside, no static TLS, no dependency on the companion"

py=/usr/bin/python3
[[ -x $py ]] || py=python3
probe='
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
lib.ff_host_malloc.restype = ctypes.c_void_p
lib.ff_host_free.argtypes = [ctypes.c_void_p]
p = lib.ff_host_malloc(1 << 20)
assert p, "ff_host_malloc failed"
ctypes.memset(p, 7, 1 << 20)
assert lib.ff_host_free(ctypes.c_void_p(p)) == 0
buf = ctypes.create_string_buffer(4096)
lib.ff_host_stats_json(buf, 4096)
stats = json.loads(buf.value)
libc = ctypes.CDLL(None)
print(stats["metadata"], "|", stats["metadata_why_not_jemalloc"][:160])
'
export FRAGFREE_CONF=backend:host FRAGFREE_HOST_CONF=emulate_populate:False
out=$("$py" -c "$probe" "$lib") || fail "dlopen of libfragfree.so from python failed"
echo "dlopened: metadata on $out"
[[ "$out" == jemalloc* || "$out" == "fragfree mmap arena"* ]] ||
  fail "metadata should be on jemalloc or fragfree's mmap arena, never the program's heap"
out=$(LD_PRELOAD="$companion" "$py" -c "$probe" "$lib") || fail "python with the companion preloaded failed"
echo "companion preloaded: metadata on $out"
[[ "$out" == jemalloc* ]] || fail "with the companion loaded at start, metadata should be on jemalloc"
echo "linkage ok"
