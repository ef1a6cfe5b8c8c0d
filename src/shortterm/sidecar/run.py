"""Running the sidecar: open the memory, serve the app with uvicorn, close the memory."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import uvicorn

from ..memory import open as open_memory
from ..memory.distill import DistillReport, DistillSchedule, distill_forever
from ..model.config import Config
from ..model.errors import ConfigError
from ..model.urls import checked_url, shown_url
from .app import create_app
from .quickstart import quickstart_lines
from .settings import SidecarSettings

__all__ = ["bound_url", "check_port", "run", "serve", "sharing_warning"]

log = logging.getLogger("shortterm.sidecar")


def bound_url(server: uvicorn.Server, settings: SidecarSettings) -> str:
    """The URL a started server listens on (its real port when ``settings.port`` is 0)."""
    port = server.servers[0].sockets[0].getsockname()[1]
    return settings.replace(port=port).base_url


async def _when_started(
    server: uvicorn.Server, settings: SidecarSettings, started: Callable[[str], None]
) -> None:
    # Bounded polling on the server's own flag: uvicorn offers no start callback.
    for _ in range(3000):
        if server.started:
            started(bound_url(server, settings))
            return
        if server.should_exit:
            return
        await asyncio.sleep(0.01)


async def serve(
    settings: SidecarSettings,
    *,
    store: str = "sqlite:///shortterm.db",
    cache: str = "memory://",
    config: Config | None = None,
    started: Callable[[str], None] | None = None,
    log_config: dict[str, Any] | None = uvicorn.config.LOGGING_CONFIG,
    distiller: DistillSchedule | None = None,
) -> None:
    """Serve until interrupted. ``started`` is called with the bound URL once listening;
    ``distiller`` runs the distiller in the background at its interval."""
    settings.check_exposure()  # before anything is opened or bound
    async with open_memory(store=store, cache=cache, config=config) as memory:
        app = create_app(memory, settings)
        server = uvicorn.Server(
            uvicorn.Config(
                app,
                host=settings.host,
                port=settings.port,
                lifespan="off",
                access_log=False,  # paths carry user ids; counts go to /metrics instead
                server_header=False,
                log_config=log_config,
            )
        )
        watcher = None
        if started is not None:
            watcher = asyncio.get_running_loop().create_task(
                _when_started(server, settings, started)
            )
        background = None
        if distiller is not None:
            background = asyncio.get_running_loop().create_task(
                distill_forever(memory, distiller, on_report=_log_report),
                name="shortterm-distiller",
            )
        try:
            await server.serve()
        finally:
            if watcher is not None:
                watcher.cancel()
            if background is not None:
                background.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await background


def _log_report(report: DistillReport) -> None:
    if report.error is not None:
        log.warning("distill run failed: %s", report.error)
    for key, why in report.failed:
        log.warning(
            "distill of %s %s channel %s failed: %s", key.kind, key.owner_id, key.channel_id, why
        )
    if report.distilled:
        log.info("distilled %d scope(s)", len(report.distilled))


def check_port(settings: SidecarSettings) -> None:
    """Refuse, with the fix, a port another process listens on: before anything is opened,
    instead of uvicorn's bare ``[Errno 98]`` after the memory was."""
    if settings.port == 0:
        return
    try:
        # create_server sets SO_REUSEADDR as uvicorn does: a port in TIME_WAIT is free.
        family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
        socket.create_server((settings.host.strip("[]"), settings.port), family=family).close()
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            return  # anything else (an address not on this machine, …) uvicorn reports
        raise ConfigError(
            f"port {settings.port} on {settings.host} is in use: another shortterm serve "
            "(`make run` in another terminal?) or another program listens there; stop it, "
            "or pick a free port with --port or SHORTTERM_PORT"
        ) from None


def announcement(
    url: str, store: str, cache: str, *, quickstart: bool = False, token: bool = False
) -> list[str]:
    """What ``serve`` prints once it listens at ``url``. A wildcard address (``0.0.0.0``,
    ``::``) is where it listens, not an address a browser or curl can open: the inspector and
    the quickstart name this machine's loopback instead."""
    local = browsable(url)
    where = url if local == url else f"{url} (every interface)"
    lines = [
        f"shortterm sidecar listening on {where} "
        f"(store {shown_url(store)}, cache {shown_url(cache)})",
        f"web inspector: {local}/ui/" + ("" if local == url else " (from this machine)"),
    ]
    if quickstart:
        lines.append("Try it:")
        lines += [f"  {line}" for line in quickstart_lines(local, token=token)]
    return lines


def browsable(url: str) -> str:
    """``url`` with a wildcard host replaced by the loopback address of its family."""
    parts = urlsplit(url)
    loopback = {"0.0.0.0": "127.0.0.1", "::": "[::1]"}.get(parts.hostname or "")
    if loopback is None:
        return url
    return urlunsplit(parts._replace(netloc=f"{loopback}:{parts.port}"))


def sharing_warning(store: str, cache: str) -> str | None:
    """What to say when replicas on this store could not share their turns."""
    shared_store = checked_url(store, "store").scheme.lower() in ("postgresql", "postgres")
    if not shared_store or checked_url(cache, "cache").scheme.lower() != "memory":
        return None
    return (
        "warning: PostgreSQL with the in-process cache: turns and crude messages stay in this "
        "process. Several replicas behind a load balancer cannot continue each other's turns "
        "(404) nor see each other's recent messages: give every replica the same Redis cache "
        "(--cache redis://host:6379/0 or SHORTTERM_CACHE), or run one replica."
    )


def run(
    settings: SidecarSettings,
    *,
    store: str,
    cache: str,
    config: Config | None = None,
    quickstart: bool = False,
    echo: Callable[[str], None] = print,
    distiller: DistillSchedule | None = None,
) -> None:
    """``shortterm serve``: announce the URL (and the quickstart), then serve."""

    def started(url: str) -> None:
        token = settings.token is not None
        for line in announcement(url, store, cache, quickstart=quickstart, token=token):
            echo(line)

    check_port(settings)
    warning = sharing_warning(store, cache)
    if warning is not None:
        echo(warning)
    if distiller is not None:
        echo(
            f"distilling due scopes every {distiller.interval_s:g} s with {distiller.model} "
            f"at {shown_url(distiller.base_url)}"
        )
    asyncio.run(
        serve(
            settings,
            store=store,
            cache=cache,
            config=config,
            started=started,
            distiller=distiller,
        )
    )
