"""The package's process-wide state: what enable() set up, kept alive for the
life of the process (PyTorch holds raw function pointers into the library and
may free tensors during interpreter shutdown). Owns no behaviour; the other
modules read and write ``STATE`` under ``LOCK``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

__all__ = ["State", "STATE", "LOCK"]


@dataclass
class State:
    mode: str | None = None  # None (not enabled), "pluggable" or "native"
    conf: str | None = None  # the FRAGFREE_CONF string given to ff_init
    lib: Any = None  # fragfree._library.Library
    allocator: Any = None  # torch.cuda.memory.CUDAPluggableAllocator (pluggable)
    native_ext: Any = None  # the compiled adapter module (native)
    hooks: dict[str, bool] = field(default_factory=dict)  # hook -> registered
    features: dict[str, Any] = field(default_factory=dict)
    # _record_memory_history: None = never called (snapshots carry whatever
    # trace libfragfree keeps), True/False = the user's last request.
    history: bool | None = None
    fractions: dict[int, float] = field(default_factory=dict)
    # (module, attribute) -> original object, for every torch function patched.
    originals: dict[tuple[Any, str], Any] = field(default_factory=dict)
    # LD_PRELOAD (_preload.py): the bootstrap enabled fragfree when torch was
    # imported; enable() is importing torch (the bootstrap then leaves the
    # choice to it); the bootstrap's notice is still to be printed by enable().
    preloaded: bool = False
    enabling: bool = False
    preload_notice_pending: bool = False


STATE = State()
LOCK = threading.RLock()
