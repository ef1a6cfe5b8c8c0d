"""``sqlite://`` URLs: the file they name and their options."""

from __future__ import annotations

from urllib.parse import parse_qs, unquote, urlsplit

from ...model.errors import ConfigError

__all__ = ["parse_url", "sqlite_path"]


def parse_url(url: str) -> tuple[str, dict[str, str]]:
    parts = urlsplit(url)
    if parts.scheme != "sqlite":
        raise ConfigError(
            f"not a sqlite URL: {url!r} (use sqlite:///relative.db or sqlite:////abs.db)"
        )
    path = unquote(parts.path)
    if parts.netloc:
        raise ConfigError(f"sqlite URLs have no host: {url!r}; use sqlite:///{parts.netloc}{path}")
    path = path[1:] if path.startswith("/") else path  # sqlite:///a.db -> a.db ; //// -> /abs
    if not path:
        raise ConfigError(f"sqlite URL without a path: {url!r}")
    options = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    return path, options


def sqlite_path(url: str) -> str:
    """The file a ``sqlite://`` URL names (relative to the working directory unless absolute)."""
    return parse_url(url)[0]
