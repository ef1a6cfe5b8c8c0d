"""The Redis hot tier: one shared cache for many processes, on one Redis node (or a primary
with replicas, which Sentinel may fail over) or on a Redis Cluster.

``tier`` is the tier itself (:class:`RedisCache`); ``client`` the connection, its bound and its
errors; ``layout`` the key layout (hash-tag groups); ``codec`` the record encoding; ``scripts``
every Lua script (``lua/``: the tier's and the sidecar's turn registry's) and how one runs in
its group's slot; ``writes``, ``directory``, ``forget``, ``repair``, ``keeper``, ``marks`` and
``scan`` the parts of the tier that build script calls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .tier import RedisCache

__all__ = ["RedisCache"]


def __getattr__(name: str) -> Any:
    # Imported on first use: the package also holds the Lua sources the sidecar reads
    # without the redis extra installed (``sources``).
    if name == "RedisCache":
        from .tier import RedisCache

        return RedisCache
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
