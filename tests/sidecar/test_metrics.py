"""/metrics: Prometheus text with per-route latency and the memory's figures at scrape time."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

import shortterm


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
