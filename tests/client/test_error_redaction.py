"""Exceptions keep their request without the API key: ``e.request``,
``e.response.request`` and the httpx error they were raised from, pickled or not."""

from __future__ import annotations

import pickle
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from openagentcore import (
    APIConnectionError,
    APIError,
    APIStatusError,
    APITimeoutError,
    AsyncClient,
    Client,
    InternalServerError,
)

from . import _hostile as hostile
from ._support import API_KEY, AnyClient, close, resolve

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sync", "async"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def make(kind: str, base_url: str, **options: Any) -> AnyClient:
    cls = Client if kind == "sync" else AsyncClient
    return cls(api_key=API_KEY, base_url=base_url, **options)


async def raised(kind: str, base_url: str, **options: Any) -> APIError:
    client = make(kind, base_url, **options)
    try:
        with pytest.raises(APIError) as caught:
            await resolve(client.sessions.retrieve("sesn_1"))
    finally:
        await close(client)
    return caught.value


def assert_keyless(error: APIError) -> None:
    assert error.request is not None
    assert error.request.headers["authorization"] == "[redacted]"
    assert error.request.url.path == "/v1/agents/sessions/sesn_1"
    if isinstance(error, APIStatusError):
        assert error.response.request.headers["authorization"] == "[redacted]"
    cause = error.__cause__
    if cause is not None and hasattr(cause, "request"):
        assert cause.request.headers["authorization"] == "[redacted]"
    assert API_KEY.encode() not in pickle.dumps(error)


@pytest.fixture
def unused_port() -> Iterator[int]:
    """A port bound to nobody listening; kept bound so nobody else takes it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


@pytest.fixture
def failing_server() -> Iterator[hostile.HostileServer]:
    with hostile.serving(
        hostile.answer(500, {"error": {"type": "server_error", "message": "x"}})
    ) as s:
        yield s


async def test_a_status_error_keeps_no_key_while_every_retry_sent_it(
    kind: str, failing_server: hostile.HostileServer
) -> None:
    error = await raised(kind, failing_server.url, max_retries=2)
    assert isinstance(error, InternalServerError)
    assert_keyless(error)
    sent = [request.headers.get("authorization") for request in failing_server.requests]
    assert sent == [f"Bearer {API_KEY}"] * 3


async def test_a_connection_error_keeps_no_key(kind: str, unused_port: int) -> None:
    error = await raised(kind, f"http://127.0.0.1:{unused_port}/v1", max_retries=0)
    assert isinstance(error, APIConnectionError)
    assert_keyless(error)


async def test_a_timeout_keeps_no_key(kind: str) -> None:
    def silent(conn: Any, request: hostile.Request, server: hostile.HostileServer) -> None:
        server.stop.wait(hostile.SAFETY)

    with hostile.serving(silent) as server:
        error = await raised(kind, server.url, max_retries=0, timeout=0.2)
    assert isinstance(error, APITimeoutError)
    assert_keyless(error)
