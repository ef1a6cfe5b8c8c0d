"""A plain ``redis://`` URL at a Redis Cluster node is refused at open, naming
``redis+cluster://`` and the node, instead of opening and failing every call with MOVED
(``RedisCache.check_topology``). The library and ``shortterm serve`` on the session's
throwaway three-master cluster (``redis_cluster``)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import uuid

import pytest

import shortterm
from shortterm.cli.app import EXIT_INVALID
from shortterm.model.errors import ConfigError
from tests.cluster_support import Cluster


def _plain_url(cluster: Cluster, prefix: str) -> tuple[str, str]:
    node = f"127.0.0.1:{cluster.ports[1]}"
    return node, f"redis://{node}/0?prefix={prefix}"


async def test_the_library_refuses_a_cluster_node_at_once_and_names_the_cluster_url(
    redis_cluster: Cluster,
) -> None:
    prefix = f"stm-mismatch-{uuid.uuid4().hex[:8]}:"
    node, url = _plain_url(redis_cluster, prefix)
    started = time.monotonic()
    with pytest.raises(ConfigError) as caught:
        async with shortterm.open(store="memory://", cache=url):
            pass
    assert time.monotonic() - started < 2
    said = str(caught.value)
    assert "redis+cluster://" in said and node in said and "Traceback" not in said
    # What it proposes opens: the same node as a seed, the same prefix.
    proposed = re.search(r"redis\+cluster://\S+", said)
    assert proposed is not None and proposed.group(0) == f"redis+cluster://{node}?prefix={prefix}"
    async with shortterm.open(store="memory://", cache=proposed.group(0)) as memory:
        turn = memory.turn(user_id="u1", channel_id="c1", server_id="g1")
        await turn.capture(
            history=[shortterm.Message("user", "hello", author_id="u1")],
            replies=[shortterm.Reply("hi")],
        )
        entry = await memory.get(shortterm.ScopeKey.server("g1", "c1"))
        assert entry is not None and entry.messages[0].content == "hello"
        await memory.clear_channel("c1")


def _free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port: int = listener.getsockname()[1]
        return port


def test_serve_exits_at_once_with_one_line_naming_the_cluster_url(
    redis_cluster: Cluster,
) -> None:
    node, url = _plain_url(redis_cluster, "stm-mismatch-serve:")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SHORTTERM_")}
    command = [sys.executable, "-m", "shortterm.cli", "serve", "--port", str(_free_port())]
    started = time.monotonic()
    done = subprocess.run(
        [*command, "--store", "memory://", "--cache", url],
        capture_output=True,
        text=True,
        env=clean,
        timeout=30,
    )
    # The interpreter's start and imports take most of it; the refusal itself is one INFO.
    assert time.monotonic() - started < 15, done.stderr
    assert done.returncode == EXIT_INVALID, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith("error: ") and "redis+cluster://" in lines[0] and node in lines[0]
    assert done.stdout == ""
