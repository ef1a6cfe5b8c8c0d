"""Fixtures for the sidecar tests: an app over the shared SQLite ``memory`` fixture (fake
clock), an in-process client, and the same app served by uvicorn over loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI

import shortterm
from shortterm.sidecar import SidecarSettings, create_app
from tests.sidecar.live import serving

TOKEN = "test-token-0123456789abcdef"


@pytest.fixture
def sidecar_settings() -> SidecarSettings:
    return SidecarSettings()


@pytest.fixture
def app(memory: shortterm.Memory, sidecar_settings: SidecarSettings) -> FastAPI:
    return create_app(memory, sidecar_settings)


@pytest.fixture
async def asgi(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """In-process: no socket, the app called directly."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        yield client


@pytest.fixture
async def base_url(app: FastAPI) -> AsyncIterator[str]:
    async with serving(app) as url:
        yield url


@pytest.fixture
async def http(base_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """Over real HTTP: uvicorn on an ephemeral loopback port."""
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as client:
        yield client
