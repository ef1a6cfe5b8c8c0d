"""`shortterm serve` as an operator meets it: the exit codes docs/cli.md promises, a clear
message for a port in use, and a warning when replicas could not share their turns."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from shortterm import ConfigError
from shortterm.cli.app import EXIT_EXTRA_MISSING, EXIT_INVALID, EXIT_UNAVAILABLE
from shortterm.sidecar import SidecarSettings
from shortterm.sidecar.run import check_port, sharing_warning

CLOSED_PORT_PG = "postgresql://postgres@127.0.0.1:1/test?connect_timeout=2"


def serve(*args: str, prelude: str = "", timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    """``shortterm serve ARGS`` in a fresh interpreter (``prelude`` runs first), to its exit."""
    code = f"{prelude}\nfrom shortterm.cli import main\nmain()"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SHORTTERM_")}
    return subprocess.run(
        [sys.executable, "-c", code, "serve", *args],
        capture_output=True,
        text=True,
        env=clean,
        timeout=timeout_s,
    )


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        yield listener.getsockname()[1]


def test_a_port_in_use_is_refused_by_name_before_anything_opens(
    busy_port: int, tmp_path: Path
) -> None:
    db = tmp_path / "never.db"
    done = serve("--port", str(busy_port), "--store", f"sqlite:///{db}")
    assert done.returncode == EXIT_INVALID, done.stderr
    assert f"port {busy_port} on 127.0.0.1 is in use" in done.stderr
    assert "--port" in done.stderr and "Errno" not in done.stderr
    assert not db.exists()


def test_an_unreachable_store_exits_3_with_the_sharing_warning() -> None:
    done = serve("--port", "0", "--store", CLOSED_PORT_PG)
    assert done.returncode == EXIT_UNAVAILABLE, done.stderr
    assert "refused the connection" in done.stderr
    assert "warning: PostgreSQL with the in-process cache" in done.stderr
    assert "--cache redis://" in done.stderr


def test_a_missing_sidecar_extra_exits_4(tmp_path: Path) -> None:
    # None in sys.modules makes `import fastapi` fail as if it were not installed.
    done = serve(
        "--port", "0", "--store", f"sqlite:///{tmp_path / 'x.db'}",
        prelude="import sys; sys.modules['fastapi'] = None",
    )  # fmt: skip
    assert done.returncode == EXIT_EXTRA_MISSING, done.stderr
    assert "pip install -e '.[sidecar]'" in done.stderr


@pytest.mark.parametrize(
    ("store", "cache", "warned"),
    [
        ("postgresql://bot@db/bot", "memory://", True),
        ("postgres://bot@db/bot", "memory://?max_entries=10", True),
        ("postgresql://bot@db/bot", "redis://cache:6379/0", False),
        ("sqlite:///shortterm.db", "memory://", False),
        ("memory://", "memory://", False),
    ],
)
def test_the_sharing_warning_names_the_fix(store: str, cache: str, warned: bool) -> None:
    warning = sharing_warning(store, cache)
    assert (warning is not None) is warned
    if warning is not None:
        assert "SHORTTERM_CACHE" in warning and "one replica" in warning


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1"])
def test_a_port_in_use_is_found_on_every_loopback_spelling(host: str) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        listener = socket.create_server((host, 0), family=family)
    except OSError:
        pytest.skip(f"cannot listen on {host} here")
    with listener:
        port = listener.getsockname()[1]
        with pytest.raises(ConfigError, match=f"port {port} on {re.escape(host)} is in use"):
            check_port(SidecarSettings(host=host, port=port))
    check_port(SidecarSettings(host=host, port=port))  # free again: no error
