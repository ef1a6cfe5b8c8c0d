"""The OpenAPI document: every route described and exemplified, its errors declared."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

import shortterm
from shortterm.sidecar import SidecarSettings, create_app
from tests.sidecar.conftest import TOKEN


def operations(doc: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, op)
        for path, ops in doc["paths"].items()
        for method, op in ops.items()
    ]


def has_example(media: dict[str, Any]) -> bool:
    return bool(media.get("example") or media.get("examples"))


async def test_every_route_has_a_description_and_an_example(asgi: httpx.AsyncClient) -> None:
    doc = (await asgi.get("/openapi.json")).json()
    ops = operations(doc)
    assert len(ops) >= 20
    for method, path, op in ops:
        where = f"{method} {path}"
        assert op.get("summary"), where
        assert len(op.get("description", "")) >= 30, where
        examples = []
        body = op.get("requestBody", {}).get("content", {})
        examples += [has_example(media) for media in body.values()]
        for status, response in op["responses"].items():
            assert response.get("description"), f"{where} {status}"
            if status.startswith("2"):
                examples += [has_example(media) for media in response.get("content", {}).values()]
        assert examples, f"{where}: no body to show an example for"
        assert all(examples), f"{where}: a body without an example"


async def test_operation_ids_are_the_function_names(asgi: httpx.AsyncClient) -> None:
    doc = (await asgi.get("/openapi.json")).json()
    ids = [op["operationId"] for _, _, op in operations(doc)]
    assert len(ids) == len(set(ids))
    assert "start_turn" in ids
    assert all(i.isidentifier() and "v1" not in i for i in ids)


async def test_errors_are_declared_with_the_problem_shape(asgi: httpx.AsyncClient) -> None:
    doc = (await asgi.get("/openapi.json")).json()
    problem = "#/components/schemas/Problem"
    for method, path, op in operations(doc):
        if path in ("/healthz", "/readyz", "/metrics"):
            continue
        responses = op["responses"]
        assert {"422", "503"} <= set(responses), (method, path)
        if "requestBody" in op:
            assert "413" in responses, (method, path)
        if "{turn_id}" in path or path.endswith("/entry"):
            assert "404" in responses, (method, path)
        # Another request holding the turn (a replica that died mid-call): turn_busy.
        assert ("409" in responses) is path.endswith(("/tool-calls", "/capture")), path
        for status in ("404", "409", "413", "422", "503"):
            if status in responses:
                media = responses[status]["content"]["application/json"]
                assert media["schema"]["$ref"] == problem
                assert has_example(media)
    assert "HTTPValidationError" not in doc["components"]["schemas"]


@pytest.mark.parametrize("token", [None, TOKEN])
async def test_auth_is_declared_exactly_when_required(
    memory: shortterm.Memory, token: str | None
) -> None:
    doc = create_app(memory, SidecarSettings(token=token)).openapi()
    for _method, path, op in operations(doc):
        secured = token is not None and path not in ("/healthz", "/readyz")
        assert ("security" in op) is secured, path
        assert ("401" in op["responses"]) is secured, path
    schemes = doc.get("components", {}).get("securitySchemes")
    assert schemes == (None if token is None else {
        "bearer": {"type": "http", "scheme": "bearer", "description": "SHORTTERM_TOKEN"}
    })  # fmt: skip


async def test_request_examples_are_accepted(asgi: httpx.AsyncClient) -> None:
    """The examples shown are real: each request example validates and runs."""
    doc = (await asgi.get("/openapi.json")).json()
    start = doc["paths"]["/v1/turns"]["post"]["requestBody"]["content"]["application/json"]
    turn = await asgi.post("/v1/turns", json=start["example"])
    assert turn.status_code == 201
    turn_id = turn.json()["turn_id"]
    for path in ("/v1/turns/{turn_id}/tool-calls", "/v1/turns/{turn_id}/capture"):
        media = doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]
        response = await asgi.post(path.format(turn_id=turn_id), json=media["example"])
        assert response.status_code in (200, 204), response.text
        if path.endswith("tool-calls"):
            assert response.json()["ok"] is True
    for template, path in [
        ("/v1/servers/{server_id}/settings", "/v1/servers/333/settings"),
        ("/v1/users/{user_id}/settings", "/v1/users/111/settings"),
        (
            "/v1/servers/{server_id}/channels/{channel_id}/entry/summary",
            "/v1/servers/333/channels/222/entry/summary",
        ),
        (
            "/v1/users/{user_id}/channels/{channel_id}/entry/categories",
            "/v1/users/111/channels/222/entry/categories",
        ),
    ]:
        media = doc["paths"][template]["put"]["requestBody"]["content"]["application/json"]
        response = await asgi.put(path, json=media["example"])
        assert response.status_code == 200, (path, response.text)
