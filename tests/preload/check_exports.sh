#!/usr/bin/env bash
# Checks that libfragfree.so's dynamic symbol table defines exactly the
# symbols listed in the expected files (one name a line, # comments).
# Usage: check_exports.sh NM LIB EXPECTED...
set -euo pipefail
nm_tool=$1
lib=$2
shift 2
actual=$("$nm_tool" -D --defined-only "$lib" | awk 'NF { print $NF }' |
  sed 's/@.*//' | sort -u)
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
