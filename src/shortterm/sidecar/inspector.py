"""The web inspector: a static page at ``/ui/`` that browses and edits memory through ``/v1``.

The page, its script and its stylesheet hold no memory: every value reaches the browser through
the JSON API, with the same bearer token as any other client, so the inspector adds no second way
in. They are therefore served without a token (a browser cannot attach one to a navigation); the
page asks for the token when the API answers 401 and keeps it in the tab's session storage only.

The content security policy allows this origin's script and stylesheet and nothing else: no inline
script, no third-party host, no framing. The script writes remembered text with ``textContent``
only, so a captured message cannot become markup.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from importlib.resources import files

from fastapi import APIRouter
from fastapi.responses import RedirectResponse, Response

__all__ = ["UI_PATHS", "UI_PREFIX", "build_inspector"]

UI_PREFIX = "/ui"

CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "connect-src 'self'",
        "img-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    ]
)

HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    # Small files: fetched again on every load, so an upgraded package is seen at once.
    "Cache-Control": "no-cache",
}


# Path under the prefix → (file in ui/, media type). "" is the page itself.
_ASSETS = {
    "": ("index.html", "text/html; charset=utf-8"),
    "app.js": ("app.js", "text/javascript; charset=utf-8"),
    "app.css": ("app.css", "text/css; charset=utf-8"),
    "favicon.svg": ("favicon.svg", "image/svg+xml"),
}

# Served without a token (middleware.OPEN_PATHS): the redirect and the files, nothing else.
UI_PATHS = frozenset({UI_PREFIX, *(f"{UI_PREFIX}/{path}" for path in _ASSETS)})


def _endpoint(body: bytes, media_type: str) -> Callable[[], Awaitable[Response]]:
    async def serve_file() -> Response:
        return Response(body, media_type=media_type, headers=HEADERS)

    return serve_file


def build_inspector() -> APIRouter:
    """The routes of the inspector; the files are read once, here."""
    folder = files(__package__).joinpath("ui")
    router = APIRouter(prefix=UI_PREFIX, include_in_schema=False)

    @router.get("")
    async def bare() -> RedirectResponse:
        # Relative asset URLs resolve against "/ui/", so "/ui" sends the browser there.
        return RedirectResponse(f"{UI_PREFIX}/", status_code=308)

    for path, (name, media_type) in _ASSETS.items():
        body = folder.joinpath(name).read_bytes()
        router.add_api_route(f"/{path}", _endpoint(body, media_type), methods=["GET"])
    return router
