"""/metrics: Prometheus text with per-route latency and the memory's figures at scrape time."""

from __future__ import annotations

import httpx
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

import shortterm
from shortterm.sidecar import SidecarSettings, create_app
from shortterm.sidecar.metrics import STATS
from tests.sidecar.conftest import TOKEN


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


async def test_metrics_report_routes_and_memory_figures(
    http: httpx.AsyncClient, memory: shortterm.Memory
) -> None:
    turn = {"user_id": "111", "channel_id": "222", "server_id": "333"}
    turn_id = (await http.post("/v1/turns", json=turn)).json()["turn_id"]
    capture = {"history": [], "replies": [{"text": "hello"}]}
    await http.post(f"/v1/turns/{turn_id}/capture", json=capture)
    await http.get("/v1/servers/333/channels/nope/entry")  # a 404
    await http.get("/not/a/route")

    response = await http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    got = samples(response.text)

    def count(route: str, method: str, status: str) -> float:
        labels = (("method", method), ("route", route), ("status", status))
        return got[("shortterm_http_requests_total", labels)]

    assert count("/v1/turns", "POST", "201") == 1
    assert count("/v1/turns/{turn_id}/capture", "POST", "204") == 1
    assert count("/v1/servers/{server_id}/channels/{channel_id}/entry", "GET", "404") == 1
    assert count("unmatched", "GET", "404") == 1
    hist = (
        "shortterm_http_request_duration_seconds_count",
        (("method", "POST"), ("route", "/v1/turns")),
    )
    assert got[hist] == 1
    bucket = (
        "shortterm_http_request_duration_seconds_bucket",
        (("le", "+Inf"), ("method", "POST"), ("route", "/v1/turns")),
    )
    assert got[bucket] == 1

    stats = memory.stats()
    assert got[("shortterm_entries", ())] == stats["entries"] == 2
    assert got[("shortterm_bytes", ())] == stats["bytes"] > 0
    for name in ("evictions", "expirations", "store_errors", "captures"):
        assert got[(f"shortterm_{name}_total", ())] == stats[name]
    assert got[("shortterm_captures_total", ())] == 1
    assert got[("shortterm_sidecar_turns", ())] == 0  # captured: released


async def test_made_up_methods_share_one_series(asgi: httpx.AsyncClient) -> None:
    for method in ("FOO", "BAR", "BAZ"):
        await asgi.request(method, "/v1/turns")
    got = samples((await asgi.get("/metrics")).text)
    other = [
        k for k in got if k[0] == "shortterm_http_requests_total" and ("method", "OTHER") in k[1]
    ]
    assert len(other) == 1
    assert got[other[0]] == 3


async def scrape(client: httpx.AsyncClient, **headers: str) -> str:
    response = await client.get("/metrics", headers=headers)
    assert response.status_code == 200, response.text
    return response.text


def check_conventions(text: str) -> dict[str, Metric]:
    """Prometheus's naming rules, as an operator's tooling expects them; the families by name."""
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("# TYPE "):
            name = line.split()[2]
            assert lines[i - 1].startswith(f"# HELP {name} "), f"{name}: no HELP before its TYPE"
    for name, family in families.items():
        assert name.startswith("shortterm_"), name
        assert family.type in ("counter", "gauge", "histogram"), (name, family.type)
        assert not name.endswith(("_created", "_s", "_ms", "_secs")), f"{name}: unit not spelled"
        assert "memory.stats()" not in family.documentation, f"{name}: {family.documentation}"
        assert len(family.documentation) > 20 and family.documentation.endswith("."), name
        for sample in family.samples:
            if family.type == "counter":
                assert sample.name == f"{name}_total", sample.name
            if family.type == "gauge":
                assert not sample.name.endswith("_total"), sample.name
        if family.type == "histogram":
            assert name.endswith("_seconds"), name
    return families


async def test_metrics_follow_prometheus_conventions(
    asgi: httpx.AsyncClient, memory: shortterm.Memory
) -> None:
    turn = {"user_id": "111", "channel_id": "222", "server_id": "333"}
    turn_id = (await asgi.post("/v1/turns", json=turn)).json()["turn_id"]
    await asgi.post(f"/v1/turns/{turn_id}/capture", json={"history": [], "replies": []})
    families = check_conventions(await scrape(asgi))

    # every figure of memory.stats() is described, under a name that carries its unit
    assert set(memory.stats()) <= set(STATS)
    assert "shortterm_hydration_seconds" in families
    assert families["shortterm_hydration_seconds"].type == "gauge"
    assert families["shortterm_write_behind_pending"].type == "gauge"
    info = families["shortterm_build_info"]
    assert info.type == "gauge"
    assert [(s.labels, s.value) for s in info.samples] == [
        ({"version": shortterm.__version__, "store": "sqlite", "cache": "memory"}, 1.0)
    ]
    # the readiness probe of this scrape: both tiers answered
    assert [s.value for s in families["shortterm_ready"].samples] == [1.0]
    tiers = {s.labels["tier"]: s.value for s in families["shortterm_tier_ready"].samples}
    assert tiers == {"store": 1.0, "cache": 1.0}


async def test_redis_and_postgres_figures_are_described(scale_urls: tuple[str, str]) -> None:
    store, cache = scale_urls
    async with shortterm.open(store=store, cache=cache) as memory:
        missing = set(memory.stats()) - set(STATS)
    assert not missing, f"memory.stats() keys without a metric description: {missing}"


async def test_refused_requests_carry_their_route(memory: shortterm.Memory) -> None:
    app = create_app(memory, SidecarSettings(token=TOKEN, max_body_bytes=1024))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        assert (await client.get("/v1/servers")).status_code == 401
        assert (await client.delete("/v1/channels/222")).status_code == 401
        auth = {"Authorization": f"Bearer {TOKEN}"}
        big = await client.post("/v1/turns", content=b"x" * 2048, headers=auth)
        assert big.status_code == 413
        assert (await client.get("/no/such/route", headers=auth)).status_code == 404
        got = samples(check_and_scrape(await scrape(client, **auth)))

    def count(route: str, method: str, status: str) -> float:
        labels = (("method", method), ("route", route), ("status", status))
        return got.get(("shortterm_http_requests_total", labels), 0.0)

    assert count("/v1/servers", "GET", "401") == 1
    assert count("/v1/channels/{channel_id}", "DELETE", "401") == 1
    assert count("/v1/turns", "POST", "413") == 1
    assert count("unmatched", "GET", "404") == 1
    assert count("unmatched", "GET", "401") == 0


def check_and_scrape(text: str) -> str:
    check_conventions(text)
    return text
