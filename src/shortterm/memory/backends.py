"""Choosing backends by URL. Heavy drivers are imported only when their URL is used."""

from __future__ import annotations

from ..cache.base import HotTier
from ..cache.inprocess import InProcessCache
from ..model.config import Config
from ..model.errors import ConfigError, ExtraMissing
from ..model.urls import checked_url, shown_url
from ..store.base import Store
from ..store.reference import ReferenceStore
from ..store.sqlite import SQLiteStore

__all__ = ["DEFAULT_STORE_URL", "make_cache", "make_store"]

DEFAULT_STORE_URL = "sqlite:///shortterm.db"
# cache/redis/client.py's schemes, spelled out here so that the driver loads only when used.
REDIS_SCHEMES = (
    "redis", "rediss", "unix", "redis+cluster", "rediss+cluster", "redis+sentinel",
    "rediss+sentinel",
)  # fmt: skip

_EXAMPLES = {"store": "sqlite:///shortterm.db", "cache": "redis://localhost:6379/0"}


def _scheme(url: str, what: str) -> str:
    if not isinstance(url, str) or "://" not in url:
        shown = shown_url(url) if isinstance(url, str) else url
        raise ConfigError(f"{what}={shown!r} is not a URL ({_hint(shown, what)})")
    return checked_url(url, what).scheme.lower()


def _hint(url: object, what: str) -> str:
    """A likely fix: the scheme's ``://`` when it is misspelt (``rediss//h``, ``redis:/h``),
    else an example URL of this tier."""
    if isinstance(url, str):
        head, sep, rest = url.partition("/")
        scheme = head.rstrip(":").lower()
        if sep and scheme and scheme.replace("+", "").isalpha():
            return f"did you mean {scheme}://{rest.lstrip('/')}?"
    return f"for example {_EXAMPLES[what]}"


def make_store(url: str) -> Store:
    scheme = _scheme(url, "store")
    if scheme == "memory":
        return ReferenceStore()
    if scheme == "sqlite":
        return SQLiteStore.from_url(url)
    if scheme in ("postgresql", "postgres"):
        try:
            from ..store.postgres import PostgresStore  # type: ignore[import-not-found,unused-ignore]
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("psycopg"):
                raise ExtraMissing("postgres", "psycopg") from exc
            raise
        store: Store = PostgresStore.from_url(url)
        return store
    raise ConfigError(
        f"store={shown_url(url)!r}: unknown scheme {scheme!r} (memory, sqlite or postgresql)"
    )


def make_cache(url: str, config: Config) -> HotTier:
    scheme = _scheme(url, "cache")
    if scheme == "memory":
        return InProcessCache(
            crude_ttl_s=config.crude_ttl_s,
            summary_ttl_s=config.summary_ttl_s,
            max_entries=config.max_entries,
            max_bytes=config.max_bytes,
        )
    if scheme in REDIS_SCHEMES:
        try:
            from ..cache.redis import RedisCache  # type: ignore[import-not-found,unused-ignore]
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("redis"):
                raise ExtraMissing("redis", "redis") from exc
            raise
        cache: HotTier = RedisCache.from_url(url, config)
        return cache
    raise ConfigError(
        f"cache={shown_url(url)!r}: unknown scheme {scheme!r} "
        "(memory, redis, redis+cluster or redis+sentinel)"
    )
