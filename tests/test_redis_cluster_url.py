"""``redis+cluster://`` URLs: seed nodes, our options, and what a cluster cannot take."""

from __future__ import annotations

import pytest

import shortterm
from shortterm.cache.redis import RedisCache
from shortterm.cache.redis.layout import Layout
from shortterm.model import ScopeMeta
from shortterm.model.config import Config
from shortterm.model.errors import ConfigError
from tests.cluster_support import Cluster


def test_seed_nodes_and_our_options_are_read() -> None:
    url = "redis+cluster://127.0.0.1:7000,127.0.0.1:7001?prefix=bot:&groups=4&socket_timeout=0.5"
    cache = RedisCache.from_url(url, Config())
    assert cache.layout.groups == 4 and cache.prefix == "bot:"
    assert cache.call_timeout_s == pytest.approx(1.2)


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("redis+cluster://127.0.0.1:7000/1", "only database 0"),
        ("redis+cluster://127.0.0.1:7000?db=2", "only database 0"),
        ("redis+cluster://127.0.0.1:7000?prefix=a{b}:", "no braces"),
        ("redis+cluster://127.0.0.1:x", "seed node"),
        ("redis+cluster://127.0.0.1:7000?groups=0", "groups"),
        ("redis://127.0.0.1:6379/0?groups=many", "groups"),
    ],
)
def test_what_a_cluster_cannot_take_is_a_config_error(url: str, said: str) -> None:
    with pytest.raises(ConfigError, match=said):
        RedisCache.from_url(url, Config())


def test_groups_are_stable_and_every_key_of_a_group_shares_its_tag() -> None:
    layout = Layout("p:", 16)
    assert layout.group_of("general") == Layout("p:", 16).group_of("general")
    group = layout.group_of("general")
    key = shortterm.ScopeKey.user("u1", "general", "p1")
    for name in (layout.record(key, "m"), layout.channel_index("general"), layout.anchor(group)):
        assert name.startswith(f"p:{{g{group}}}")


async def test_the_facade_opens_a_cluster_url(redis_cluster: Cluster) -> None:
    url = f"{redis_cluster.url}?prefix=stm-open:&groups=3"
    key = shortterm.ScopeKey.server("g1", "c1", "p1")
    async with shortterm.open(store="memory://", cache=url) as memory:
        turn = memory.turn(user_id="u1", channel_id="c1", server_id="g1", persona_id="p1")
        await turn.capture(
            history=[shortterm.Message("user", "hello there", author_id="u1")],
            replies=[shortterm.Reply("hi", persona_id="p1")],
        )
        entry = await memory.get(key)
        assert entry is not None and entry.messages[0].content == "hello there"
        await memory.clear_channel("c1")
        assert await memory.get(key) is None


async def test_scripts_flushed_on_some_nodes_are_resent_and_counts_stay_exact(
    redis_cluster: Cluster,
) -> None:
    """A node that lost its scripts (a restart) answers NOSCRIPT to its part of a pipeline:
    only that part is sent again, by source, so nothing is applied twice or counted out."""
    cache = RedisCache.from_url(f"{redis_cluster.url}?prefix=stm-flush:&groups=16", Config())
    meta = ScopeMeta(server_id="g1")
    try:
        for n in range(12):
            key = shortterm.ScopeKey.user("u1", f"c{n}", "p1")
            await cache.capture(
                key, (shortterm.Message("user", "hi", author_id="u1"),), meta, None, 1.0
            )
        assert await cache.delete_owner("user", "nobody") == 0  # every master has the script
        redis_cluster.cli(redis_cluster.ports[0], "script", "flush")  # one master of three
        assert await cache.delete_owner("user", "u1") == 12
        assert await cache.delete_owner("user", "u1") == 0
    finally:
        await cache.clear_prefix()
        await cache.close()
