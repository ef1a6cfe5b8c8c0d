"""The OpenAPI document: what FastAPI generates, patched where it says less than the API does.

The patches add each model's first example to its request and response bodies, the bounds
this memory's configuration sets, plain types for optional query parameters, and the bearer
scheme when a token is configured. The document is built once per app, on first request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from ..model.config import Config
from .middleware import OPEN_PATHS

if TYPE_CHECKING:
    from .settings import SidecarSettings

__all__ = ["build_document", "openapi_document"]


def _absent_is_null(parameter: dict[str, Any]) -> None:
    """A query string cannot carry a JSON null: an optional parameter is simply omitted, so
    the document gives its plain type instead of ``anyOf [type, null]``."""
    schema = parameter.get("schema", {})
    options = schema.get("anyOf")
    if parameter.get("in") != "query" or not options:
        return
    kept = [o for o in options if o.get("type") != "null"]
    if len(kept) == 1 and len(options) == 2:
        del schema["anyOf"]
        schema.update(kept[0])


def build_document(app: FastAPI, secured: bool, config: Config) -> dict[str, Any]:
    """``app.openapi``: the generated document with the patches above, cached on the app."""
    if app.openapi_schema is not None:
        return app.openapi_schema
    doc = get_openapi(
        title=app.title,
        version=app.version,
        description=app.description,
        routes=app.routes,
        tags=app.openapi_tags,
    )
    schemas = doc.get("components", {}).get("schemas", {})
    server = schemas["ServerSettingsModel"]["properties"]
    server["crude_message_count"]["maximum"] = config.max_messages
    server["categories"]["maxItems"] = config.max_categories

    def show_example(media: dict[str, Any]) -> None:
        ref = media.get("schema", {}).get("$ref", "")
        examples = schemas.get(ref.rsplit("/", 1)[-1], {}).get("examples")
        if "example" not in media and "examples" not in media and examples:
            media["example"] = examples[0]

    for path, operations in doc["paths"].items():
        for operation in operations.values():
            for parameter in operation.get("parameters", ()):
                _absent_is_null(parameter)
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            if body is not None:
                show_example(body)
            for status, response in operation["responses"].items():
                media = response.get("content", {}).get("application/json")
                if status.startswith("2") and media is not None:
                    show_example(media)
            if secured and path not in OPEN_PATHS:
                operation["security"] = [{"bearer": []}]
    if secured:
        doc.setdefault("components", {})["securitySchemes"] = {
            "bearer": {"type": "http", "scheme": "bearer", "description": "SHORTTERM_TOKEN"}
        }
    app.openapi_schema = doc
    return doc


def openapi_document(settings: SidecarSettings | None = None) -> dict[str, Any]:
    """The sidecar's OpenAPI document, built from an app over a memory that is never opened
    (building it touches no backend): for generated clients and schema tests."""
    import time

    # Imported here: the app module installs build_document, so it imports this one.
    from ..memory.backends import make_cache
    from ..memory.facade import Memory
    from ..store.reference import ReferenceStore
    from .app import create_app

    config = Config()
    unopened = Memory(
        store=ReferenceStore(),
        cache=make_cache("memory://", config),
        config=config,
        clock=time.time,
    )
    doc: dict[str, Any] = create_app(unopened, settings).openapi()
    return doc
