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

from dataclasses import dataclass
from importlib.resources import files

from fastapi import APIRouter
from fastapi.responses import RedirectResponse, Response

__all__ = ["UI_PREFIX", "build_inspector"]

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
    # Small and versioned with the package: revalidating every load keeps an upgrade visible.
    "Cache-Control": "no-cache",
}


@dataclass(frozen=True)
class _Asset:
    name: str
    media_type: str


_ASSETS = (
    _Asset("index.html", "text/html; charset=utf-8"),
    _Asset("app.js", "text/javascript; charset=utf-8"),
    _Asset("app.css", "text/css; charset=utf-8"),
    _Asset("favicon.svg", "image/svg+xml"),
)


def build_inspector() -> APIRouter:
    """The routes of the inspector; the files are read once, here."""
    folder = files(__package__).joinpath("ui")
    body = {a.name: folder.joinpath(a.name).read_bytes() for a in _ASSETS}
    media = {a.name: a.media_type for a in _ASSETS}
    router = APIRouter(prefix=UI_PREFIX, include_in_schema=False)

    def asset(name: str) -> Response:
        return Response(body[name], media_type=media[name], headers=HEADERS)

    @router.get("")
    async def bare() -> RedirectResponse:
        # Relative asset URLs resolve against "/ui/", so "/ui" sends the browser there.
        return RedirectResponse(f"{UI_PREFIX}/", status_code=308)

    @router.get("/")
    async def page() -> Response:
        return asset("index.html")

    @router.get("/app.js")
    async def script() -> Response:
        return asset("app.js")

    @router.get("/app.css")
    async def stylesheet() -> Response:
        return asset("app.css")

    @router.get("/favicon.svg")
    async def icon() -> Response:
        return asset("favicon.svg")

    return router
