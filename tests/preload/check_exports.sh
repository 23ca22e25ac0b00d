#!/usr/bin/env bash
# Checks that libfragfree.so's dynamic symbol table defines exactly the
# symbols listed in the expected files (one name a line, # comments), and,
# before that, that it exports nothing of what it links privately: no abseil
# (abseil is static and hidden), no jemalloc, no torch/c10/ATen/pybind name, no
# allocation function. Each forbidden name is reported as
# "forbidden (<what>): <name>", whatever the expected lists say.
# Usage: check_exports.sh NM LIB EXPECTED...
set -euo pipefail
nm_tool=$1
lib=$2
shift 2
actual=$("$nm_tool" -D --defined-only "$lib" | awk 'NF { print $NF }' |
  sed 's/@.*//' | sort -u)
forbidden=0
while IFS= read -r name; do
  [[ -n "$name" ]] || continue
  what=""
  case "$name" in
    *absl*) what=abseil ;;
    je_* | ffje_* | ff_jemalloc* | mallocx | rallocx | xallocx | sallocx | dallocx | \
      sdallocx | nallocx | mallctl* | malloc_stats_print | malloc_conf) what=jemalloc ;;
    _ZN3c10* | _ZNK3c10* | _ZN2at* | _ZNK2at* | _ZN5torch* | _ZNK5torch* | *pybind11* | \
      PyInit_* | THP*) what=torch ;;
    malloc | free | calloc | realloc | posix_memalign | aligned_alloc | memalign | valloc | \
      pvalloc | malloc_usable_size | _Znw* | _Zna* | _Zdl* | _Zda*) what="allocation function" ;;
  esac
  if [[ -n "$what" ]]; then
    echo "forbidden ($what): $name"
    forbidden=$((forbidden + 1))
  fi
done <<<"$actual"
if ((forbidden > 0)); then
  echo "$lib exports $forbidden forbidden symbol(s): fix the version script" \
       "(shim/fragfree.map) or the link (--exclude-libs,ALL)"
  exit 1
fi
expected=$(cat "$@" | sed -e 's/#.*//' -e 's/[[:space:]]//g' | sed '/^$/d' |
  sort -u)
if [[ "$actual" != "$expected" ]]; then
  echo "libfragfree.so exports differ from the expected list"
  echo "(< expected only, > exported only):"
  diff <(echo "$expected") <(echo "$actual") || true
  echo "Fix shim/fragfree.map, or update tests/preload/expected_exports*.txt"
  exit 1
fi
echo "exports ok: $(echo "$actual" | wc -l) symbols"
