"""Walking every key of the Redis tier: the keys held (a ``ZSCAN`` of each group's expiry
set) and every key under the prefix (a ``SCAN``, to clear it). Neither blocks Redis for
long; a scan's cursor may repeat a name."""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial
from typing import Any, cast

from redis.exceptions import RedisClusterException, RedisError

from ...model import ScopeKey
from ...model.errors import StoreUnavailable
from .codec import key_of
from .scripts import Groups

__all__ = ["clear_prefix", "scope_keys"]


async def scope_keys(g: Groups, batch: int) -> AsyncIterator[list[ScopeKey]]:
    """Every key held, in batches (see ``ScopeLister``)."""

    async def expiring() -> AsyncIterator[Any]:
        for group in g.all:
            expiries = g.layout.base(group) + "x"
            async for name, _score in g.client.zscan_iter(expiries, count=batch):
                yield name

    async for names in _batches(expiring(), batch):
        yield [key_of(name) for name in names]


async def clear_prefix(g: Groups, prefix: str) -> int:
    """Delete every key under ``prefix``; returns how many."""
    removed = 0
    pattern = _glob_escape(prefix) + "*"
    async for batch in _batches(g.client.scan_iter(match=pattern, count=1000), 1000):
        unlinked = await g.calls.call("clear", partial(g.client.unlink, *batch))
        removed += int(unlinked)
    g.totals = [(0, 0)] * g.layout.groups
    return removed


def _glob_escape(text: str) -> str:
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)


async def _batches(names: AsyncIterator[Any], size: int) -> AsyncIterator[list[str]]:
    """The names a Redis scan yields, in lists of ``size``; a failure is the tier's."""
    batch: list[str] = []
    try:
        async for name in names:
            batch.append(cast(str, name))
            if len(batch) >= size:
                yield batch
                batch = []
    except (RedisError, RedisClusterException, OSError) as exc:
        raise StoreUnavailable(f"Redis scan failed: {exc}") from exc
    if batch:
        yield batch
