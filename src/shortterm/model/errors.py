"""The one exception tree of shortterm.

::

    ShortTermError
    ├── InvalidInput      (also a ValueError): a caller passed something we refuse
    ├── ConfigError       : configuration (URLs, environment) cannot be used
    ├── StoreUnavailable  : a durable or shared backend failed; nothing was acknowledged
    │   └── CacheUnavailable : the failing backend is the hot tier (Redis), not the store
    └── ExtraMissing      (also an ImportError): an optional dependency is not installed

Backends wrap their driver errors with ``raise StoreUnavailable(...) from exc`` so callers
never need to know which driver is underneath. The Redis hot tier raises
:class:`CacheUnavailable`, so that a caller (the sidecar, the health counters) can tell which
tier failed; ``except StoreUnavailable`` catches both.
"""

from __future__ import annotations

__all__ = [
    "CacheUnavailable",
    "ConfigError",
    "ExtraMissing",
    "InvalidInput",
    "ShortTermError",
    "StoreUnavailable",
]


class ShortTermError(Exception):
    """Base class of every error raised by shortterm."""


class InvalidInput(ShortTermError, ValueError):
    """A value was refused. The message names the field, the value and what is allowed."""

    def __init__(self, field: str, value: object, allowed: str) -> None:
        shown = repr(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        super().__init__(f"{field}={shown} is invalid: {allowed}")
        self.field = field
        self.value = value
        self.allowed = allowed


class ConfigError(ShortTermError):
    """Configuration that cannot be used (a bad URL, an unreadable environment value)."""


class StoreUnavailable(ShortTermError):
    """A backend failed. The operation that raised it was not acknowledged.

    ``maybe_applied`` is true when the failure came after a write was sent (a connection
    dropped mid-commit): it may or may not have been saved."""

    def __init__(self, message: str = "", *, maybe_applied: bool = False) -> None:
        super().__init__(message)
        self.maybe_applied = maybe_applied


class CacheUnavailable(StoreUnavailable):
    """The hot tier (Redis) failed, not the durable store. A :class:`StoreUnavailable`, so
    existing handlers keep working; the durable tier may well be fine (a capture's durable
    counter step, for one, may already be committed)."""


class ExtraMissing(ShortTermError, ImportError):
    """An optional dependency is absent; the message says which extra installs it."""

    def __init__(self, extra: str, module: str) -> None:
        # Not yet on a package index: the lines that work today, from a checkout or a wheel.
        super().__init__(
            f"this feature needs the {module!r} package: pip install -e '.[{extra}]' in a "
            f"shortterm checkout (or pip install 'dist/shortterm-<version>-py3-none-any.whl"
            f"[{extra}]' from a built wheel)"
        )
        self.extra = extra
