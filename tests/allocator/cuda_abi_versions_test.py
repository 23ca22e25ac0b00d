"""Checks that every CUDA driver function fragfree resolves with cuGetProcAddress
gets the ABI that cuda.h declares under the name the code calls.
(Run by ctest as cuda_abi_versions_test, label host.)

cuGetProcAddress(name, CUDA_VERSION) returns the newest ABI of `name`. Where a
newer ABI changed the parameters while cuda.h still declares the old one under
that name (cuStreamGetCtx v12050, cuCtxGetDevice v13000), the function pointer
would take an argument more than the code passes: allocator/phys/cuda_driver.cc
must pin the older version (AbiVersionOf). For each function of
FF_CUDA_DRIVER_FUNCTIONS this compares the parameter types of the declaration
code sees for the name with those
of the version cuGetProcAddress will return (the newest typedef in
cudaTypedefs.h, or the pinned one).

  python3 cuda_abi_versions_test.py <repo root> <CUDA include dir>
"""
import re
import sys
from pathlib import Path

root, include = Path(sys.argv[1]), Path(sys.argv[2])
names = re.findall(r"X\((cu\w+)\)", (root / "allocator/phys/cuda_driver.h").read_text())
pins = {n: int(v) for n, v in re.findall(
    r'name == "(cu\w+)"\) return (\d+);', (root / "allocator/phys/cuda_driver.cc").read_text())}
cuda_h = (include / "cuda.h").read_text()
typedefs = (include / "cudaTypedefs.h").read_text()


def types(params):
    """Parameter types without names, spaces, or _v1/_v2 handle-type suffixes."""
    out = []
    for p in params.split(","):
        p = re.sub(r"\b(\w+)\s*$", "", p.strip()) if re.search(r"\w\s*[\s*]\s*\w+\s*$", p) else p
        out.append(re.sub(r"_v\d\b|\s+", "", p))
    return ",".join(out)


bad, checked = [], 0
for name in names:
    # The first declaration is the one code sees (cuda.h's `#define cuMemAlloc
    # cuMemAlloc_v2` renames it; the legacy ABIs are declared at the end).
    declared_name = name
    decl = re.search(rf"CUresult CUDAAPI {name}\((.*?)\);", cuda_h, re.S)
    versions = {int(v): a for v, a in re.findall(
        rf"typedef CUresult \(CUDAAPI \*PFN_{name}_v(\d+)\)\((.*?)\);", typedefs, re.S)}
    if not decl or not versions:
        bad.append(f"{name}: no declaration ({declared_name}) or typedef found")
        continue
    version = pins.get(name, max(versions))
    if version not in versions:  # a pin below the first version: the first one
        version = min(v for v in versions if v >= version) if any(
            v >= version for v in versions) else max(versions)
    checked += 1
    if types(decl.group(1)) != types(versions[version]):
        bad.append(f"{name}: cuda.h declares {declared_name}({types(decl.group(1))}) but "
                   f"cuGetProcAddress returns v{version}({types(versions[version])})"
                   + ("" if name in pins else "; pin it in AbiVersionOf"))
if bad:
    print("CUDA driver ABI mismatches:\n  " + "\n  ".join(bad))
    sys.exit(1)
print(f"ok: {checked} functions, {len(pins)} pinned to an older ABI")
