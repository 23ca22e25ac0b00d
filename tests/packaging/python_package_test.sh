#!/usr/bin/env bash
# The Python package carries libfragfree.so: in a fresh venv (no network:
# --no-index, --no-build-isolation, with Debian's setuptools and wheel through
# --system-site-packages: python3-setuptools, python3-wheel), `pip wheel`
# of integrations/python with FRAGFREE_PREBUILT_LIBRARY gives a platform wheel
# holding fragfree/libfragfree.so; installed, `import fragfree` finds that
# copy with no FRAGFREE_LIBRARY, from a folder outside the repository, and
# uses it on the host backend. (Building the library with CMake instead of
# the prebuilt one is the same step with the variable unset; see README.)
# Usage: python_package_test.sh PYTHON LIBFRAGFREE PACKAGE_SRC
set -euo pipefail
py=$1 lib=$(realpath "$2") src=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
"$py" -m venv --system-site-packages "$tmp/venv" || fail "$py -m venv (python3-venv installed?)"
vpy=$tmp/venv/bin/python
"$vpy" -c "import setuptools, wheel" 2>/dev/null ||
  fail "no setuptools or wheel for $py (scripts/deps.sh installs python3-setuptools, python3-wheel)"
# A copy of the package source: the build writes build/ and *.egg-info there.
cp -r "$src" "$tmp/src"
rm -rf "$tmp/src/build" "$tmp/src"/*.egg-info "$tmp/src/fragfree/libfragfree.so"
FRAGFREE_PREBUILT_LIBRARY=$lib FRAGFREE_BUILD_NATIVE_ADAPTER=0 \
  "$vpy" -m pip wheel -q --no-index --no-build-isolation --no-deps -w "$tmp/dist" \
  "$tmp/src" >"$tmp/wheel.log" 2>&1 || { cat "$tmp/wheel.log"; fail "pip wheel"; }
wheel=$(ls "$tmp"/dist/fragfree-*.whl)
echo "wheel: $(basename "$wheel")"
[[ "$wheel" != *-none-any.whl ]] || fail "the wheel is tagged pure Python"
listing=$("$vpy" -m zipfile -l "$wheel") || fail "cannot list $wheel"
grep -q "fragfree/libfragfree.so" <<<"$listing" || fail "the wheel has no fragfree/libfragfree.so"
"$vpy" -m pip install -q --no-index --no-deps "$wheel" >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log"; fail "pip install of the wheel"; }
cd "$tmp"
out=$(env -u FRAGFREE_LIBRARY FRAGFREE_CONF=backend:host "$vpy" -c '
import fragfree, os
lib = fragfree.library()
print(lib.path)
assert os.path.basename(lib.path) == "libfragfree.so", lib.path
assert os.path.dirname(lib.path) == os.path.dirname(fragfree.__file__), lib.path
p = lib.malloc(1 << 20)
lib.free(p)
print("version", lib.version())
') || fail "import fragfree from the installed wheel: $out"
echo "$out"
[[ "$out" == "$tmp/venv/"* ]] || fail "library not loaded from the venv: $out"
echo "python package ok"
