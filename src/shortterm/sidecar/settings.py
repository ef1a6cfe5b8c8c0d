"""The sidecar's own configuration: one frozen value object, read from the environment in one
place. Nothing here imports the web stack, so the CLI can validate before it loads FastAPI."""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..model.errors import ConfigError, InvalidInput

__all__ = ["MIN_TOKEN_CHARS", "SidecarSettings", "is_loopback"]

MIN_TOKEN_CHARS = 16
_MAKE_TOKEN = "python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"

# (low, high) for every integer setting; from_env and __post_init__ share it.
_RANGES: dict[str, tuple[int, int]] = {
    "port": (0, 65535),
    "max_body_bytes": (1024, 64 << 20),
    "turn_ttl_s": (1, 86400),
    "max_turns": (1, 10_000_000),
}


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine. A name other than
    ``localhost`` counts as exposed: it may resolve to anything."""
    name = host.strip().strip("[]")
    if name.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class SidecarSettings:
    """Where the sidecar listens and what it accepts.

    ``token`` (``SHORTTERM_TOKEN``) turns bearer authentication on for every route but
    ``/healthz`` and ``/readyz``; it is required when ``host`` is not a loopback address.
    ``max_body_bytes`` bounds a request body (413 beyond it). A turn id lives ``turn_ttl_s``
    seconds after its last use, and at most ``max_turns`` ids are kept (the least recently used
    go first; a shared registry in Redis bounds each channel group to its share).
    """

    host: str = "127.0.0.1"
    port: int = 8765
    token: str | None = dataclasses.field(default=None, repr=False)  # a secret: never in logs
    max_body_bytes: int = 1 << 20
    turn_ttl_s: int = 900
    max_turns: int = 10_000

    def __post_init__(self) -> None:
        if not isinstance(self.host, str) or not self.host.strip():
            raise InvalidInput("host", self.host, "an address such as 127.0.0.1")
        for name, (low, high) in _RANGES.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise InvalidInput(name, value, f"an integer from {low} to {high}")
        token = self.token
        if token is not None:
            if not isinstance(token, str) or not token.isascii() or not token.isprintable():
                raise InvalidInput("token", "<hidden>", "printable ASCII characters")
            if len(token) < MIN_TOKEN_CHARS or token != token.strip():
                raise InvalidInput(
                    "token",
                    "<hidden>",
                    f"at least {MIN_TOKEN_CHARS} characters without surrounding spaces; "
                    f"make one with {_MAKE_TOKEN}",
                )

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def check_exposure(self) -> None:
        """Refuse to serve a non-loopback address without a token."""
        if self.token is None and not self.loopback:
            raise ConfigError(
                f"refusing to listen on {self.host!r} without a token: set SHORTTERM_TOKEN "
                f"(make one with {_MAKE_TOKEN}) or listen on 127.0.0.1"
            )

    def replace(self, **changes: Any) -> SidecarSettings:
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_env(cls, environ: Mapping[str, str], **overrides: Any) -> SidecarSettings:
        """Read ``SHORTTERM_HOST``, ``SHORTTERM_PORT``, ``SHORTTERM_TOKEN``,
        ``SHORTTERM_MAX_BODY_BYTES``, ``SHORTTERM_TURN_TTL_S`` and ``SHORTTERM_MAX_TURNS``;
        ``overrides`` that are not ``None`` (command-line options) win over the environment."""
        changes: dict[str, Any] = {}
        host = environ.get("SHORTTERM_HOST", "").strip()
        if host:
            changes["host"] = host
        token = environ.get("SHORTTERM_TOKEN", "")
        if token.strip():
            changes["token"] = token
        for name in _RANGES:
            raw = environ.get(f"SHORTTERM_{name.upper()}", "").strip()
            if not raw:
                continue
            try:
                changes[name] = int(raw)
            except ValueError:
                raise ConfigError(f"SHORTTERM_{name.upper()}={raw!r} is not an integer") from None
        changes.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return cls(**changes)
        except InvalidInput as exc:
            raise ConfigError(f"sidecar settings: {exc}") from exc
