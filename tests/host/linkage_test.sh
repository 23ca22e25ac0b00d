#!/usr/bin/env bash
# How fragfree keeps its metadata and its linkage clean (docs/host.md, "Why the
# mmap arena, and no jemalloc"):
#  1. libfragfree.so contains no jemalloc code, defines no allocation function
#     (malloc, free, operator new, ...), not even a local one, and needs no
#     static TLS, so it dlopens anywhere (ctypes, torch's
#     CUDAPluggableAllocator);
#  2. dlopened from python, fragfree works and its metadata is on its own mmap
#     arena; the program's malloc stays glibc's.
# Usage: linkage_test.sh NM LIBFRAGFREE
set -euo pipefail
nm_tool=$1 lib=$2
fail() { echo "FAIL: $*"; exit 1; }
alloc_re='^(malloc|free|calloc|realloc|posix_memalign|aligned_alloc|memalign|valloc|pvalloc|malloc_usable_size|mallocx|dallocx|mallctl|_Zn[wa].*|_Zd[la].*)$'

jem=$("$nm_tool" "$lib" 2>/dev/null | awk 'NF{print $NF}' | grep -E '^(ffje_|je_|ff_jemalloc)' | head -3 || true)
[[ -z "$jem" ]] || fail "libfragfree.so contains jemalloc symbols: $jem"
defined=$("$nm_tool" --defined-only "$lib" 2>/dev/null | awk 'NF{print $NF}' |
  grep -E "$alloc_re" || true)
[[ -z "$defined" ]] || fail "libfragfree.so defines: $defined"
dynamic=$(readelf -d "$lib")
if grep -q STATIC_TLS <<<"$dynamic"; then fail "libfragfree.so needs static TLS"; fi
if grep -q jemalloc <<<"$dynamic"; then fail "libfragfree.so depends on a jemalloc"; fi
echo "libfragfree.so ok: no jemalloc, no allocation function, no static TLS"

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
assert stats["metadata_bytes"] > 0, stats
print(stats["metadata"])
'
export FRAGFREE_CONF=backend:host FRAGFREE_HOST_CONF=emulate_populate:False
out=$("$py" -c "$probe" "$lib") || fail "dlopen of libfragfree.so from python failed"
echo "dlopened: metadata on $out"
[[ "$out" == "fragfree mmap arena" ]] ||
  fail "metadata should be on fragfree's mmap arena, never the program's heap: $out"
echo "linkage ok"
