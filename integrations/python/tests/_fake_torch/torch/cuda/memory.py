"""Fake torch.cuda.memory: a CUDAPluggableAllocator that records the hook
addresses it is given, and memory functions that fail the way real torch's do
while a bare pluggable allocator is current. memory_summary indexes the same
keys real torch's does (with the same integer format specs), so fragfree's
patched memory_stats is exercised through it."""

import ctypes

REGISTERED = {}  # setter name -> address
CURRENT = []  # allocators made current
FRACTION_CALLS = []


class _RawAllocator:
    def __getattr__(self, name):
        if not name.startswith("set_"):
            raise AttributeError(name)

        def setter(address):
            if not isinstance(address, int) or address == 0:
                raise TypeError(f"{name} needs a function address, got {address!r}")
            REGISTERED[name] = address

        return setter


class _CUDAAllocator:
    def __init__(self, allocator):
        self._allocator = allocator

    def allocator(self):
        return self._allocator


class CUDAPluggableAllocator(_CUDAAllocator):
    def __init__(self, path_to_so_file, alloc_fn_name, free_fn_name):
        lib = ctypes.CDLL(path_to_so_file)
        self.alloc_fn = ctypes.cast(getattr(lib, alloc_fn_name), ctypes.c_void_p).value
        self.free_fn = ctypes.cast(getattr(lib, free_fn_name), ctypes.c_void_p).value
        self._allocator = _RawAllocator()


def change_current_allocator(allocator):
    from . import is_initialized

    if is_initialized():
        raise RuntimeError("Can't swap an already initialized allocator")
    CURRENT.append(allocator)


def _unsupported(what):
    raise RuntimeError(f"CUDAPluggableAllocator does not yet support {what}. "
                       "If you need it, please file an issue describing your use case.")


def memory_stats_as_nested_dict(device=None):
    _unsupported("getDeviceStats")


def memory_stats(device=None):
    return dict(memory_stats_as_nested_dict(device))


def memory_allocated(device=None):
    return memory_stats(device=device).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device=None):
    return memory_stats(device=device).get("allocated_bytes.all.peak", 0)


def memory_reserved(device=None):
    return memory_stats(device=device).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device=None):
    return memory_stats(device=device).get("reserved_bytes.all.peak", 0)


def reset_peak_memory_stats(device=None):
    _unsupported("resetPeakStats")


def reset_accumulated_memory_stats(device=None):
    _unsupported("resetAccumulatedStats")


def reset_max_memory_allocated(device=None):
    return reset_peak_memory_stats(device=device)


def memory_snapshot(mempool_id=None):
    _unsupported("snapshot")


def _snapshot(device=None):
    _unsupported("snapshot")


def _dump_snapshot(filename="dump_snapshot.pickle"):
    _snapshot()


def _record_memory_history(enabled="all", *args, **kwargs):
    _unsupported("recordHistory")


def empty_cache():
    pass


def set_per_process_memory_fraction(fraction, device=None):
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    if fraction < 0 or fraction > 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    FRACTION_CALLS.append((fraction, device))


def get_per_process_memory_fraction(device=None):
    _unsupported("getMemoryFraction")


def memory_summary(device=None, abbreviated=False):
    stats = memory_stats(device=device)
    lines = ["CUDA OOMs: {num_ooms:<12d} | cudaMalloc retries: {num_alloc_retries:<8d}"]
    groups = ["allocated_bytes", "active_bytes", "requested_bytes", "reserved_bytes",
              "inactive_split_bytes", "allocation", "active", "segment", "inactive_split"]
    for group in groups:
        for pool in ("all", "large_pool", "small_pool"):
            values = [stats[f"{group}.{pool}.{m}"] for m in ("current", "peak", "allocated", "freed")]
            lines.append(f"{group}.{pool} " + " ".join(f"{v:7d}" for v in values))
    for group in ("oversize_allocations", "oversize_segments"):
        values = [stats[f"{group}.{m}"] for m in ("current", "peak", "allocated", "freed")]
        lines.append(f"{group} " + " ".join(f"{v:7d}" for v in values))
    fmt = {k.replace(".", "-"): v for k, v in stats.items()}
    fmt.update(num_ooms=stats["num_ooms"], num_alloc_retries=stats["num_alloc_retries"])
    return "\n".join(lines).format(**fmt)
