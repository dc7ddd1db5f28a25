"""The whole-attempt deadline holds whatever transport sends: an ``http_client``
passed in, or httpx's own transports when a proxy is configured (the SDK's transports
bound it inside; these are bounded from outside).

The server trickles a response head forever, one byte at a time, so no per-operation
timeout ever fires: only the deadline ends the call. The bound asserted (10 s for a
0.5 s timeout) is generous on purpose; without the deadline the call never ends.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import anyio
import httpx
import pytest

from openagentcore import APITimeoutError, AsyncClient, Client

from . import _hostile as hostile
from ._support import API_KEY, close, resolve

pytestmark = pytest.mark.anyio

TIMEOUT = 0.5
#: Far more than TIMEOUT on any machine, far less than forever.
BOUND = 10.0
_PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


def endless_head(
    conn: socket.socket, request: hostile.Request, server: hostile.HostileServer
) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
    while not server.pause(0.05):
        conn.sendall(b"a")


@pytest.fixture
def server() -> Iterator[hostile.HostileServer]:
    with hostile.serving(endless_head) as running:
        yield running


@pytest.fixture(params=["sync", "async"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=["http_client", "proxy"])
def route(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def make(
    kind: str, route: str, server: hostile.HostileServer, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Callable[[], Any]]:
    """Clients whose requests reach ``server`` through the transport under test."""
    made: list[Any] = []
    foreign: list[Any] = []

    def new() -> Any:
        options: dict[str, Any] = {"timeout": TIMEOUT, "max_retries": 0, "api_key": API_KEY}
        if route == "proxy":
            for name in _PROXY_VARIABLES:
                monkeypatch.delenv(name, raising=False)
                monkeypatch.delenv(name.upper(), raising=False)
            monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{server.port}")
            options["base_url"] = "http://api.example.invalid/v1"
        else:
            options["base_url"] = server.url
            options["http_client"] = httpx.Client() if kind == "sync" else httpx.AsyncClient()
            foreign.append(options["http_client"])
        client = (Client if kind == "sync" else AsyncClient)(**options)
        made.append(client)
        return client

    yield new
    for client in made:
        await close(client)
    for http in foreign:
        await resolve(http.close() if isinstance(http, httpx.Client) else http.aclose())


async def bounded(kind: str, call: Callable[[], Any]) -> BaseException | None:
    """What ``call`` raised, waiting at most BOUND; fails the test if it is still going."""
    if kind == "async":
        with anyio.move_on_after(BOUND):
            try:
                await resolve(call())
            except Exception as exc:
                return exc
            return None
        pytest.fail(f"the call was still running after {BOUND} s (timeout {TIMEOUT} s)")
    outcome: list[BaseException | None] = []
    finished = threading.Event()

    def run() -> None:
        try:
            call()
            outcome.append(None)
        except Exception as exc:
            outcome.append(exc)
        finished.set()

    threading.Thread(target=run, daemon=True).start()
    if not finished.wait(BOUND):
        pytest.fail(f"the call was still running after {BOUND} s (timeout {TIMEOUT} s)")
    return outcome[0]


async def test_a_request_ends_at_the_deadline(
    kind: str, make: Callable[[], Any], server: hostile.HostileServer
) -> None:
    client = make()
    error = await bounded(kind, lambda: client.sessions.retrieve("sesn_1"))
    assert isinstance(error, APITimeoutError)
    assert server.requests, "the request never reached the server"


async def test_opening_a_stream_ends_at_the_deadline(
    kind: str, make: Callable[[], Any], server: hostile.HostileServer
) -> None:
    client = make()
    error = await bounded(kind, lambda: client.sessions.events.stream("sesn_1"))
    assert isinstance(error, APITimeoutError)
    assert server.requests, "the request never reached the server"
