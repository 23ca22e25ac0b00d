"""Fake torch.cuda (see torch/__init__.py of this fake): lazy-init state and
the re-exports of torch.cuda.memory that real torch has."""

from . import memory
from .memory import (  # noqa: F401 - re-exported like torch/cuda/__init__.py
    empty_cache,
    get_per_process_memory_fraction,
    max_memory_allocated,
    max_memory_reserved,
    memory_allocated,
    memory_reserved,
    memory_snapshot,
    memory_stats,
    memory_stats_as_nested_dict,
    memory_summary,
    reset_accumulated_memory_stats,
    reset_max_memory_allocated,
    reset_peak_memory_stats,
    set_per_process_memory_fraction,
)

_initialized = False


def is_initialized():
    return _initialized


def init():
    global _initialized
    _initialized = True


def is_available():
    return True


def current_device():
    init()
    return 0


def device_count():
    return 1
