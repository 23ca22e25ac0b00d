"""Native-API mode: find or build the C++ CUDAAllocator adapter
(csrc/native_allocator.cpp and the headers beside it) and install it.

Owns the adapter's build (the one set of torch.utils.cpp_extension arguments,
``compile_adapter``; the adapter includes the library's public C header, found
by ``public_headers``), used in two places:

* at install time (integrations/python/setup.py), when torch is importable
  then: the adapter is built into the package as ``fragfree/_native_adapter.so``
  with ``fragfree/_native_adapter.json`` recording the torch version, its CUDA
  version, the Python ABI and the adapter sources' digest;
* at run time, the compile-once fallback: when there is no prebuilt adapter,
  or it was built for another torch / Python / source, the adapter is compiled
  against the running torch on first use and cached ($TORCH_EXTENSIONS_DIR if
  set, else ~/.cache/fragfree/torch_extensions; one build per torch version /
  CUDA version / source digest), with one line on stderr while it compiles.

``install_native(lib_path)`` loads the adapter and calls its ``install``. After
that, torch's own memory APIs, cuDNN benchmark, CUDA graphs / cudagraph trees,
OOM observers and torch.cuda.OutOfMemoryError go through the adapter; nothing
in torch is monkeypatched.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from ._errors import FragfreeError

__all__ = [
    "build_extension",
    "install_native",
    "compile_adapter",
    "adapter_metadata",
    "load_prebuilt_adapter",
    "source_digest",
    "public_headers",
    "PUBLIC_HEADERS",
    "SOURCE",
    "PREBUILT_NAME",
    "PREBUILT_METADATA",
    "extension_dir",
]

PACKAGE_DIR = Path(__file__).resolve().parent
SOURCE = PACKAGE_DIR / "csrc" / "native_allocator.cpp"
# The public C header the adapter includes as <fragfree/fragfree.h>, and the
# field lists it includes as <fragfree/stat_fields.h>. An installed package
# carries copies in fragfree/include/fragfree/ (setup.py); a source tree has
# them in the repository (shim/include, allocator/obs).
PUBLIC_HEADERS = ("fragfree.h", "stat_fields.h")
_REPO = PACKAGE_DIR.parent.parent.parent
_REPO_HEADERS = {
    "fragfree.h": _REPO / "shim" / "include" / "fragfree" / "fragfree.h",
    "stat_fields.h": _REPO / "allocator" / "obs" / "stat_fields.h",
}
# The install-time build: fragfree/_native_adapter.so (module name
# fragfree._native_adapter) and its metadata.
PREBUILT_NAME = "_native_adapter"
PREBUILT_METADATA = PACKAGE_DIR / (PREBUILT_NAME + ".json")


def extension_dir() -> Path:
    base = os.environ.get("TORCH_EXTENSIONS_DIR")
    if base:
        return Path(base)
    return Path(os.path.expanduser("~")) / ".cache" / "fragfree" / "torch_extensions"


def public_headers() -> dict[str, Path]:
    """The files of <fragfree/fragfree.h> and <fragfree/stat_fields.h>: the
    package's copies when it has them (installed), else the repository's
    (source tree). Raises FragfreeError when neither is there."""
    packaged = {name: PACKAGE_DIR / "include" / "fragfree" / name for name in PUBLIC_HEADERS}
    for headers in (packaged, _REPO_HEADERS):
        if all(path.is_file() for path in headers.values()):
            return headers
    raise FragfreeError(
        "fragfree: the C API header the native adapter includes is missing: neither "
        f"{packaged['fragfree.h'].parent} nor the repository's "
        f"{_REPO_HEADERS['fragfree.h']} has fragfree.h and stat_fields.h (reinstall the "
        "package from the fragfree repository)"
    )


def source_digest() -> str:
    """The adapter is native_allocator.cpp, the headers beside it and the
    public C header it includes: a change to any of them is a new build.
    (Without that header the digest covers csrc/ alone; compiling then fails,
    saying the header is missing.)"""
    h = hashlib.sha1()
    for path in sorted(SOURCE.parent.iterdir()):
        if path.suffix in (".cpp", ".h"):
            h.update(path.name.encode() + b"\0" + path.read_bytes())
    try:
        headers = public_headers()
    except FragfreeError:
        headers = {}
    for name, path in sorted(headers.items()):
        h.update(b"fragfree/" + name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:10]


def _stage_public_headers(build_dir: Path) -> Path:
    """Copies the public headers to <build_dir>/include/fragfree (rewritten
    only when they differ, so ninja sees no change otherwise) and returns the
    include directory to pass to the compiler."""
    include = build_dir / "include"
    (include / "fragfree").mkdir(parents=True, exist_ok=True)
    for name, path in public_headers().items():
        data = path.read_bytes()
        target = include / "fragfree" / name
        if not target.is_file() or target.read_bytes() != data:
            target.write_bytes(data)
    return include


def _extension_name(torch: Any) -> str:
    tag = f"{torch.__version__}_cu{torch.version.cuda}"
    return "fragfree_native_" + re.sub(r"[^A-Za-z0-9]", "_", tag) + "_" + source_digest()


def adapter_metadata(torch: Any) -> dict[str, Any]:
    """What a prebuilt adapter records, and must match to be loaded."""
    return {
        "torch": str(torch.__version__),
        "cuda": torch.version.cuda,
        "python": sys.implementation.cache_tag,
        "source_digest": source_digest(),
    }


def compile_adapter(name: str, build_dir: Path, verbose: bool = False) -> Any:
    """Compiles the adapter as module ``name`` in ``build_dir`` (ninja keeps
    it: a second call with the same sources only loads it) and imports it.
    Needs torch with CUDA headers, a C++ compiler, the CUDA toolkit headers
    (CUDA_HOME) and ninja."""
    from torch.utils import cpp_extension

    if not SOURCE.is_file():
        raise FragfreeError(f"fragfree: the native adapter source is missing: {SOURCE}")
    build_dir.mkdir(parents=True, exist_ok=True)
    include = _stage_public_headers(build_dir)
    return cpp_extension.load(
        name=name,
        sources=[str(SOURCE)],
        build_directory=str(build_dir),
        extra_include_paths=[str(include)],
        with_cuda=True,
        extra_cflags=["-O2"],
        extra_ldflags=["-ldl"],
        verbose=verbose,
    )


def _prebuilt_path() -> Path | None:
    for path in sorted(PACKAGE_DIR.glob(PREBUILT_NAME + "*.so")):
        return path
    return None


def load_prebuilt_adapter(torch: Any) -> Any | None:
    """The adapter built at install time, when there is one and it was built
    for the running torch (same version and CUDA version), this Python and
    these sources; else None, saying on stderr why a present one is refused."""
    path = _prebuilt_path()
    if path is None or not PREBUILT_METADATA.is_file():
        return None
    try:
        built = json.loads(PREBUILT_METADATA.read_text())
    except (OSError, ValueError) as e:
        print(f"fragfree: ignoring the prebuilt native adapter: unreadable "
              f"{PREBUILT_METADATA}: {e}", file=sys.stderr)
        return None
    running = adapter_metadata(torch)
    if (built.get("torch"), built.get("cuda")) != (running["torch"], running["cuda"]):
        print(
            f"fragfree: the prebuilt native adapter ({path.name}) was built for torch "
            f"{built.get('torch')} (CUDA {built.get('cuda')}), but this is torch "
            f"{running['torch']} (CUDA {running['cuda']}): not loading it",
            file=sys.stderr,
        )
        return None
    for key, what in (("python", "Python"), ("source_digest", "adapter sources")):
        if built.get(key) != running[key]:
            print(
                f"fragfree: the prebuilt native adapter was built for other {what} "
                f"({built.get(key)}, here {running[key]}): not loading it",
                file=sys.stderr,
            )
            return None
    module_name = f"{__package__}.{PREBUILT_NAME}"
    loader = importlib.machinery.ExtensionFileLoader(module_name, str(path))
    spec = importlib.util.spec_from_file_location(module_name, str(path), loader=loader)
    if spec is None:
        return None
    try:
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
    except ImportError as e:
        print(f"fragfree: the prebuilt native adapter {path} does not load ({e}): "
              "compiling one instead", file=sys.stderr)
        return None
    sys.modules[module_name] = module
    return module


def build_extension(verbose: bool = False) -> Any:
    """The adapter module: the prebuilt one when it matches the running torch,
    else compiled once against it (or its cached build loaded)."""
    import torch

    prebuilt = load_prebuilt_adapter(torch)
    if prebuilt is not None:
        return prebuilt
    name = _extension_name(torch)
    build_dir = extension_dir() / name
    if not (build_dir / f"{name}.so").is_file():
        print(
            f"fragfree: compiling the native adapter for torch {torch.__version__} "
            f"(once, cached in {build_dir})",
            file=sys.stderr,
            flush=True,
        )
    try:
        return compile_adapter(name, build_dir, verbose=verbose)
    except FragfreeError:
        raise
    except Exception as e:
        raise FragfreeError(
            f"fragfree: building the native adapter failed ({type(e).__name__}: {e}). It "
            f"needs a C++ compiler, the CUDA toolkit headers (CUDA_HOME) and ninja; the build "
            f"directory is {build_dir}. Use fragfree.enable() (pluggable mode) meanwhile, or "
            f"set FRAGFREE_NATIVE_VERBOSE=1 to see the compiler output."
        ) from e


def install_native(lib_path: str) -> tuple[Any, dict[str, Any]]:
    """Loads (or builds) the adapter and makes it PyTorch's CUDA allocator.
    Returns the extension module (keep it alive) and its feature dict."""
    verbose = os.environ.get("FRAGFREE_NATIVE_VERBOSE", "") not in ("", "0")
    ext = build_extension(verbose=verbose)
    try:
        features = dict(ext.install(lib_path))
    except RuntimeError as e:
        raise FragfreeError(f"fragfree: installing the native adapter failed: {e}") from e
    return ext, features
