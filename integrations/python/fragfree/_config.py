"""Python keyword arguments -> a FRAGFREE_CONF string.

``fragfree.enable(reclaim_before_grow=False, memory_limit_mb=4096)`` becomes
``"reclaim_before_grow:False,memory_limit_mb:4096"``: the same syntax as
PYTORCH_CUDA_ALLOC_CONF (``key:value,key:[k:v,...]``). This module only
formats; libfragfree validates keys and values (an unknown key is a
ConfigError naming it, raised by ff_init). The list of keys lives in the
library (allocator/options.cc) and docs/python.md.

Value formatting: bool -> True/False; int -> decimal; float -> repr (0.5);
str -> as is; list/tuple -> [a,b,c]; dict -> [k:v,...]; None -> key omitted.
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping

from ._errors import ConfigError

__all__ = ["format_conf", "merge_conf", "format_value"]

_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Characters that are tokens of the FRAGFREE_CONF grammar.
_SPECIAL = set(",[]")
# Keys whose values are file paths (may contain ':', which the library accepts).
_PATH_KEYS = {"snapshot_path", "oom_report_path"}


def format_value(key: str, value: Any) -> str:
    """One value in FRAGFREE_CONF syntax (raises ConfigError if it cannot be
    written in that syntax)."""
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigError(f"fragfree config '{key}': {value!r} is not a finite number")
        return repr(value)
    if isinstance(value, str):
        text = value.strip()
        if not text:
            raise ConfigError(f"fragfree config '{key}': empty value")
        # Paths may contain ':' and brackets (the library joins tokens up to
        # the next ','); other values may contain no grammar token at all.
        forbidden = {","} if key in _PATH_KEYS else _SPECIAL | {":"}
        bad = sorted(set(text) & forbidden)
        if bad:
            raise ConfigError(
                f"fragfree config '{key}': value {value!r} contains {''.join(bad)!r}, "
                "which FRAGFREE_CONF uses as separators"
            )
        return text
    if isinstance(value, Mapping):
        items = [f"{_atom(key, k)}:{_atom(key, v)}" for k, v in value.items()]
        return "[" + ",".join(items) + "]"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_atom(key, v) for v in value) + "]"
    raise ConfigError(
        f"fragfree config '{key}': cannot express {type(value).__name__} value "
        f"{value!r} in FRAGFREE_CONF (use bool, int, float, str, list or dict)"
    )


def _atom(key: str, value: Any) -> str:
    if isinstance(value, (list, tuple, Mapping)):
        raise ConfigError(f"fragfree config '{key}': nested lists/dicts are not supported")
    text = format_value(key, value)
    if ":" in text:
        raise ConfigError(f"fragfree config '{key}': element {value!r} contains ':'")
    return text


def format_conf(config: Mapping[str, Any]) -> str:
    """The FRAGFREE_CONF string for ``config`` (keys in the given order;
    None values are skipped)."""
    parts = []
    for key, value in config.items():
        if not isinstance(key, str) or not _KEY_RE.match(key):
            raise ConfigError(f"fragfree config: {key!r} is not a valid key name")
        if value is None:
            continue
        parts.append(f"{key}:{format_value(key, value)}")
    return ",".join(parts)


def merge_conf(env_conf: str | None, config: Mapping[str, Any]) -> str | None:
    """What enable() passes to ff_init: $FRAGFREE_CONF first, then the keyword
    arguments (the library applies keys left to right, so keywords win).
    None means "no keywords and no environment": the library's defaults."""
    extra = format_conf(config)
    env_conf = (env_conf or "").strip().strip(",")
    if env_conf and extra:
        return f"{env_conf},{extra}"
    if extra:
        return extra
    return env_conf or None
