"""The bucket advisor from Python (docs/oom.md, "Bucket advisor").

Owns:

* ``bucket_advice`` -- the K rounding buckets that minimise padding for the
  request sizes libfragfree has sampled on a device, with the
  ``round_buckets:[...]`` FRAGFREE_CONF string and the ``enable()`` keywords
  that apply them;
* ``sequence_buckets`` -- the same optimisation over a data loader's sequence
  lengths ("pad variable-length batches to a few fixed lengths");
* ``pad_to_bucket`` and ``BucketCollate`` -- a data loader's side of it: the
  length a sequence pads to, and a collate function that pads a batch of 1-D
  sequences to the smallest bucket that holds the longest;
* ``summary_line`` -- the advice line of ``fragfree.memory_summary()``.

The optimisation runs in libfragfree (ff_bucket_advice_json,
ff_advise_sequence_buckets_json); a library built before them raises
FragfreeError saying so. Nothing here imports torch: tensors are recognised by
their methods. Thread-safety: stateless functions; a BucketCollate is immutable.
"""

from __future__ import annotations

import bisect
import operator
import sys
from typing import Any, Iterable, Sequence

from ._errors import FragfreeValueError
from ._library import Library
from ._stats import format_size

__all__ = [
    "bucket_advice",
    "sequence_buckets",
    "pad_to_bucket",
    "BucketCollate",
    "summary_line",
    "MAX_BUCKETS",
]

# The most buckets libfragfree advises (kMaxAdvisedBuckets).
MAX_BUCKETS = 256


def _count(name: str, value: Any, low: int, high: int | None = None) -> int:
    """``value`` as an int in [low, high] (no bools, no floats), or
    FragfreeValueError naming ``name``."""
    if isinstance(value, bool):
        raise FragfreeValueError(f"{name} must be an integer, got {value!r}")
    try:
        n = operator.index(value)
    except TypeError:
        raise FragfreeValueError(f"{name} must be an integer, got {value!r}") from None
    if n < low or (high is not None and n > high):
        bound = f"from {low} to {high}" if high is not None else f">= {low}"
        raise FragfreeValueError(f"{name} must be {bound}, got {n}")
    return n


def bucket_advice(lib: Library, device: int, num_buckets: int = 4) -> dict[str, Any]:
    """The advice for ``device``'s sampled request sizes (see
    fragfree.bucket_advice). ``num_buckets`` 0: the bucket_advice_k option."""
    k = _count("num_buckets", num_buckets, 0, MAX_BUCKETS)
    advice = lib.bucket_advice(device, k)
    buckets = [int(b) for b in advice.get("buckets", [])]
    # fragfree.enable(**advice["config"]) applies it (as FRAGFREE_CONF does).
    advice["config"] = {"round_buckets": buckets} if buckets else {}
    return advice


def _as_lengths(lengths: Iterable[Any]) -> list[int]:
    """Sequence lengths (ints, or a tensor / array with ``tolist``) as a list of
    non-negative ints that fit int64; FragfreeValueError names a bad element."""
    if hasattr(lengths, "tolist"):  # torch.Tensor, numpy.ndarray
        lengths = lengths.tolist()
    out = []
    for i, x in enumerate(lengths):
        if isinstance(x, bool):
            raise FragfreeValueError(f"lengths[{i}] must be an integer, got {x!r}")
        try:
            n = operator.index(x)
        except TypeError:
            raise FragfreeValueError(f"lengths[{i}] must be an integer, got {x!r}") from None
        if n < 0:
            raise FragfreeValueError(f"lengths[{i}] is negative ({n})")
        if n >= 2**63:
            raise FragfreeValueError(f"lengths[{i}] is too large ({n})")
        out.append(n)
    return out


def sequence_buckets(
    lib: Library, lengths: Iterable[Any], num_buckets: int = 4, multiple_of: int = 8
) -> dict[str, Any]:
    """The advice for a data loader's sequence lengths (see
    fragfree.sequence_buckets)."""
    k = _count("num_buckets", num_buckets, 1, MAX_BUCKETS)
    m = _count("multiple_of", multiple_of, 1, 2**31 - 1)
    advice = lib.advise_sequence_buckets(_as_lengths(lengths), k, m)
    advice["buckets"] = [int(b) for b in advice.get("lengths", [])]
    return advice


def _sorted_buckets(buckets: Iterable[Any]) -> list[int]:
    """Bucket lengths (or an advice dict's ``buckets``) sorted, deduplicated and
    checked positive; an empty list is a FragfreeValueError."""
    if isinstance(buckets, dict):  # an advice dict from sequence_buckets()
        buckets = buckets.get("buckets", [])
    out = sorted({_count("bucket", b, 1) for b in buckets})
    if not out:
        raise FragfreeValueError("buckets is empty: give at least one length")
    return out


def pad_to_bucket(length: int, buckets: Iterable[Any]) -> int:
    """The smallest bucket >= ``length``. ``buckets``: lengths in any order, or
    the dict sequence_buckets() returns. A length above the largest bucket
    raises FragfreeValueError (a ValueError): truncate it, or advise buckets
    from lengths that include it."""
    n = _count("length", length, 0)
    b = _sorted_buckets(buckets)
    i = bisect.bisect_left(b, n)
    if i == len(b):
        raise FragfreeValueError(
            f"length {n} is longer than the largest bucket ({b[-1]}): truncate it or "
            "advise buckets from lengths that include it"
        )
    return b[i]


def _is_tensor(x: Any) -> bool:
    """True for a torch.Tensor (recognised without importing torch)."""
    return type(x).__module__.split(".")[0] == "torch" and hasattr(x, "new_full")


def _is_ndarray(x: Any) -> bool:
    """True for a numpy.ndarray (recognised without importing numpy)."""
    return type(x).__module__.split(".")[0] == "numpy" and hasattr(x, "dtype")


class BucketCollate:
    """A collate function that pads a batch of 1-D sequences to the smallest
    bucket that holds its longest sequence, so that a model sees only
    ``len(buckets)`` sequence lengths (fixed shapes: freed blocks fit the next
    step's requests, and cuDNN / torch.compile see few shapes).

    ``BucketCollate(buckets, pad_value=0)``: ``buckets`` are lengths or the dict
    sequence_buckets() returns. Sequences are torch tensors (the result is a
    tensor of the first one's dtype and device, made with ``new_full``), numpy
    arrays (a numpy array) or Python sequences (a list of lists). A batch whose
    longest sequence is above the largest bucket raises FragfreeValueError,
    unless ``truncate=True`` cuts it to the largest bucket. With
    ``return_lengths=True`` the call returns ``(padded, lengths)``, lengths in
    the same kind (a torch.long tensor for tensors).

    Usage: ``DataLoader(ds, batch_size=32, collate_fn=BucketCollate(
    fragfree.sequence_buckets(lengths, 4), pad_value=tokenizer.pad_token_id))``.
    """

    def __init__(
        self,
        buckets: Iterable[Any],
        pad_value: Any = 0,
        *,
        truncate: bool = False,
        return_lengths: bool = False,
    ):
        self.buckets: tuple[int, ...] = tuple(_sorted_buckets(buckets))
        self.pad_value = pad_value
        self.truncate = bool(truncate)
        self.return_lengths = bool(return_lengths)

    def __repr__(self) -> str:
        return (
            f"BucketCollate(buckets={list(self.buckets)}, pad_value={self.pad_value!r}, "
            f"truncate={self.truncate}, return_lengths={self.return_lengths})"
        )

    def target_length(self, longest: int) -> int:
        """The padded length of a batch whose longest sequence is ``longest``."""
        if longest > self.buckets[-1]:
            if self.truncate:
                return self.buckets[-1]
            raise FragfreeValueError(
                f"a sequence of length {longest} is longer than the largest bucket "
                f"({self.buckets[-1]}): pass truncate=True, or advise buckets from "
                "lengths that include it"
            )
        return self.buckets[bisect.bisect_left(self.buckets, longest)]

    def __call__(self, batch: Sequence[Any]) -> Any:
        """Pads ``batch`` (1-D sequences) to ``target_length`` of its longest."""
        if len(batch) == 0:
            raise FragfreeValueError("BucketCollate: the batch is empty")
        for i, x in enumerate(batch):
            shape = getattr(x, "shape", None)
            if shape is not None and len(shape) != 1:
                raise FragfreeValueError(
                    f"BucketCollate pads 1-D sequences; item {i} has shape {tuple(shape)}"
                )
        sizes = [len(x) for x in batch]
        target = self.target_length(max(sizes))
        kept = [min(n, target) for n in sizes]
        first = batch[0]
        if _is_tensor(first):
            out = first.new_full((len(batch), target), self.pad_value)
            for i, x in enumerate(batch):
                out[i, : kept[i]] = x[: kept[i]]
            if self.return_lengths:
                torch = sys.modules["torch"]
                return out, torch.tensor(kept, dtype=torch.long)
            return out
        if _is_ndarray(first):
            np = sys.modules["numpy"]
            out = np.full((len(batch), target), self.pad_value, dtype=first.dtype)
            for i, x in enumerate(batch):
                out[i, : kept[i]] = x[: kept[i]]
            return (out, np.asarray(kept, dtype=np.int64)) if self.return_lengths else out
        rows = [list(x[: kept[i]]) + [self.pad_value] * (target - kept[i])
                for i, x in enumerate(batch)]
        return (rows, kept) if self.return_lengths else rows


def summary_line(lib: Library, device: int) -> str:
    """memory_summary()'s bucket-advice line ("" when the library lacks the
    advisor or has sampled no request on ``device``)."""
    if not lib.has_bucket_advice:
        return ""
    advice = lib.bucket_advice(device, 0)
    if not advice.get("requests") or not advice.get("conf"):
        return ""
    return (
        f"  bucket advice: FRAGFREE_CONF={advice['conf']} "
        f"({advice['advised_distinct_sizes']} block sizes instead of "
        f"{advice['default_distinct_sizes']}; padding "
        f"{format_size(advice['padding_bytes'])}, default rounding "
        f"{format_size(advice['default_padding_bytes'])}; sampled 1 in "
        f"{advice['sample_every']} requests)\n"
    )
