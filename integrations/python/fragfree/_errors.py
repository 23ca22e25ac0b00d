"""fragfree's Python exceptions: one base class and the few kinds a caller may
want to catch separately. Owns nothing else; every other module raises these.

The C API reports errors as an ff_status_t plus a message (ff_last_error());
``error_for_status`` turns that pair into the matching exception.
"""

from __future__ import annotations

__all__ = [
    "FragfreeError",
    "FragfreeValueError",
    "ConfigError",
    "FragfreeOutOfMemoryError",
    "LibraryNotFoundError",
    "STATUS_NAMES",
    "error_for_status",
]

# ff_status_t values (shim/include/fragfree/fragfree.h).
FF_OK = 0
FF_ERR_INVALID_ARGUMENT = 1
FF_ERR_OOM = 2
FF_ERR_NO_DEVICE = 3
FF_ERR_STATE = 4
FF_ERR_BACKEND = 5
FF_ERR_INTERNAL = 6

STATUS_NAMES = {
    FF_OK: "FF_OK",
    FF_ERR_INVALID_ARGUMENT: "FF_ERR_INVALID_ARGUMENT",
    FF_ERR_OOM: "FF_ERR_OOM",
    FF_ERR_NO_DEVICE: "FF_ERR_NO_DEVICE",
    FF_ERR_STATE: "FF_ERR_STATE",
    FF_ERR_BACKEND: "FF_ERR_BACKEND",
    FF_ERR_INTERNAL: "FF_ERR_INTERNAL",
}


class FragfreeError(RuntimeError):
    """Base class of every error raised by the fragfree package.

    ``status`` is the C API's status name (e.g. ``"FF_ERR_STATE"``) when the
    error came from libfragfree, else ``None``.
    """

    def __init__(self, message: str, status: str | None = None):
        super().__init__(message)
        self.status = status


class FragfreeValueError(FragfreeError, ValueError):
    """libfragfree rejected an argument (bad pointer, double free, bad size...)."""


class ConfigError(FragfreeValueError):
    """A bad configuration key or value (unknown key, malformed value)."""


class FragfreeOutOfMemoryError(FragfreeError, MemoryError):
    """libfragfree could not satisfy an allocation after every reclaim."""


class LibraryNotFoundError(FragfreeError):
    """libfragfree.so could not be found or loaded; the message lists where we looked."""


def error_for_status(
    status: int, message: str, what: str, config: bool = False
) -> FragfreeError:
    """The exception for a failed C call: ``what`` names the call, ``message``
    is ff_last_error(); ``config`` marks calls whose bad arguments are
    configuration (ff_init), which raise ConfigError."""
    name = STATUS_NAMES.get(status, f"status {status}")
    text = f"{what} failed ({name}): {message or 'no message from libfragfree'}"
    if status == FF_ERR_INVALID_ARGUMENT:
        return (ConfigError if config else FragfreeValueError)(text, name)
    if status == FF_ERR_OOM:
        return FragfreeOutOfMemoryError(text, name)
    return FragfreeError(text, name)
