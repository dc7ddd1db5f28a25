"""Fixtures for the client unit tests: a mocked API, both clients, and recorded waits.

Every test runs with the ``OPENAGENTCORE_*`` variables unset and with retry sleeps
recorded instead of slept, so the suite is fast and a test can assert the exact wait.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import respx

from openagentcore import AsyncClient, Client

from ._support import API_KEY, BASE_URL, AnyClient


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _no_env_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAGENTCORE_API_KEY", raising=False)
    monkeypatch.delenv("OPENAGENTCORE_BASE_URL", raising=False)


@pytest.fixture(autouse=True)
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Seconds tenacity asked to sleep between attempts, in order; nothing really sleeps.

    tenacity sleeps through ``time.sleep`` (sync) and ``asyncio.sleep`` (async), both
    looked up at call time, so patching them observes the wait the policy chose.
    """
    recorded: list[float] = []
    real_async_sleep = asyncio.sleep

    def record(seconds: float) -> None:
        recorded.append(seconds)

    async def record_async(seconds: float) -> None:
        recorded.append(seconds)
        await real_async_sleep(0)

    monkeypatch.setattr(time, "sleep", record)
    monkeypatch.setattr(asyncio, "sleep", record_async)
    return recorded


_create_ssl_context = httpx.create_ssl_context


@pytest.fixture(scope="session")
def _shared_tls_context() -> ssl.SSLContext:
    return httpx.create_ssl_context()


@pytest.fixture(autouse=True)
def _fast_client_construction(
    monkeypatch: pytest.MonkeyPatch, _shared_tls_context: ssl.SSLContext
) -> None:
    """Loading the CA bundle costs ~50 ms per client and respx answers every request
    without TLS, so clients built with default TLS settings share one context."""

    def shared(
        verify: ssl.SSLContext | str | bool = True, cert: Any = None, trust_env: bool = True
    ) -> ssl.SSLContext:
        if verify is True and cert is None:
            return _shared_tls_context
        return _create_ssl_context(verify=verify, cert=cert, trust_env=trust_env)

    monkeypatch.setattr("httpx._transports.default.create_ssl_context", shared)
    monkeypatch.setattr(httpx, "create_ssl_context", shared)  # the AsyncClient calls it


@pytest.fixture
def api() -> Iterator[respx.MockRouter]:
    """The mocked API root; routes are relative to ``BASE_URL``. Unrouted calls fail."""
    with respx.mock(base_url=BASE_URL, assert_all_called=False) as router:
        yield router


@pytest.fixture(params=["sync", "async"])
async def client(request: pytest.FixtureRequest) -> AsyncIterator[AnyClient]:
    """A ``Client`` and an ``AsyncClient``: tests written once run against both."""
    if request.param == "sync":
        with Client(api_key=API_KEY, base_url=BASE_URL) as sync_client:
            yield sync_client
    else:
        async with AsyncClient(api_key=API_KEY, base_url=BASE_URL) as async_client:
            yield async_client


@pytest.fixture(params=["sync", "async"])
async def no_retry_client(request: pytest.FixtureRequest) -> AsyncIterator[AnyClient]:
    """Both clients with ``max_retries=0``: each failure surfaces on the first attempt."""
    if request.param == "sync":
        with Client(api_key=API_KEY, base_url=BASE_URL, max_retries=0) as sync_client:
            yield sync_client
    else:
        async with AsyncClient(api_key=API_KEY, base_url=BASE_URL, max_retries=0) as async_client:
            yield async_client
