"""Native-API mode: build and install the C++ CUDAAllocator adapter
(csrc/native_allocator.cpp and the headers beside it) with
torch.utils.cpp_extension.

Owns compiling the adapter against the installed torch on first use (cached:
$TORCH_EXTENSIONS_DIR if set, else ~/.cache/fragfree/torch_extensions; one build
per torch version / CUDA version / source hash) and calling its ``install``.
After that, torch's own memory APIs, cuDNN benchmark, CUDA graphs / cudagraph
trees, OOM observers and torch.cuda.OutOfMemoryError go through the adapter;
nothing in torch is monkeypatched.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Any

from ._errors import FragfreeError

__all__ = ["build_extension", "install_native", "SOURCE", "extension_dir"]

SOURCE = Path(__file__).resolve().parent / "csrc" / "native_allocator.cpp"


def extension_dir() -> Path:
    base = os.environ.get("TORCH_EXTENSIONS_DIR")
    if base:
        return Path(base)
    return Path(os.path.expanduser("~")) / ".cache" / "fragfree" / "torch_extensions"


def _extension_name(torch: Any) -> str:
    # The adapter is native_allocator.cpp and the headers beside it: a change
    # to any of them is a new build.
    h = hashlib.sha1()
    for path in sorted(SOURCE.parent.iterdir()):
        if path.suffix in (".cpp", ".h"):
            h.update(path.name.encode() + b"\0" + path.read_bytes())
    digest = h.hexdigest()[:10]
    tag = f"{torch.__version__}_cu{torch.version.cuda}"
    return "fragfree_native_" + re.sub(r"[^A-Za-z0-9]", "_", tag) + "_" + digest


def build_extension(verbose: bool = False) -> Any:
    """Compiles (or loads the cached build of) the adapter module."""
    import torch
    from torch.utils import cpp_extension

    if not SOURCE.is_file():
        raise FragfreeError(f"fragfree: the native adapter source is missing: {SOURCE}")
    name = _extension_name(torch)
    build_dir = extension_dir() / name
    build_dir.mkdir(parents=True, exist_ok=True)
    try:
        return cpp_extension.load(
            name=name,
            sources=[str(SOURCE)],
            build_directory=str(build_dir),
            with_cuda=True,
            extra_cflags=["-O2"],
            extra_ldflags=["-ldl"],
            verbose=verbose,
        )
    except Exception as e:
        raise FragfreeError(
            f"fragfree: building the native adapter failed ({type(e).__name__}: {e}). It "
            f"needs a C++ compiler, the CUDA toolkit headers (CUDA_HOME) and ninja; the build "
            f"directory is {build_dir}. Use fragfree.enable() (pluggable mode) meanwhile, or "
            f"set FRAGFREE_NATIVE_VERBOSE=1 to see the compiler output."
        ) from e


def install_native(lib_path: str) -> tuple[Any, dict[str, Any]]:
    """Builds the adapter and makes it PyTorch's CUDA allocator. Returns the
    extension module (keep it alive) and its feature dict."""
    verbose = os.environ.get("FRAGFREE_NATIVE_VERBOSE", "") not in ("", "0")
    ext = build_extension(verbose=verbose)
    try:
        features = dict(ext.install(lib_path))
    except RuntimeError as e:
        raise FragfreeError(f"fragfree: installing the native adapter failed: {e}") from e
    return ext, features
