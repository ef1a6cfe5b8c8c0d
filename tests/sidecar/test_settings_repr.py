"""A sidecar's settings can be logged: the token never shows."""

from __future__ import annotations

from shortterm.sidecar import SidecarSettings


def test_the_token_is_not_in_the_repr() -> None:
    secret = "s3cret-token-0123456789abcdef"
    settings = SidecarSettings(token=secret)
    assert secret not in repr(settings) and secret not in str(settings)
    assert "port=8765" in repr(settings)  # the rest still shows
