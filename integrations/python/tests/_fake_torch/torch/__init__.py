"""A stand-in for the `torch` package, used only by tests/test_fake_torch.py in a
subprocess (never on sys.path otherwise) to exercise fragfree's pluggable-mode
wiring -- hook registration, allocator switch, patching of torch.cuda.memory
and its re-exports -- on machines without PyTorch. It models only the
behaviour fragfree relies on: torch.cuda.is_initialized(), current_device(),
CUDAPluggableAllocator's setters, change_current_allocator's "already
initialised" refusal, and memory functions that raise as they do with a bare
pluggable allocator.
"""

from . import cuda  # noqa: F401

__version__ = "0.0.0+fake"


class device:  # noqa: N801 - mirrors torch.device
    def __init__(self, spec, index=None):
        kind, _, idx = str(spec).partition(":")
        self.type = kind
        self.index = int(idx) if idx else index

    def __repr__(self):
        return f"device(type={self.type!r}, index={self.index})"
