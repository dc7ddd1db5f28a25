"""Servers that answer but fail: a gateway answering 502 to everything, and a web
server answering every path with a page (status 200, text/html, as a single-page
app's fallback does). A serve that must end gives up on them after
``unreachable_timeout``, asks them at a bounded rate, and warns rarely, naming the URL.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

import pytest
from anyio.from_thread import start_blocking_portal

from openagentcore import APIError, AsyncClient, Client
from openagentcore.runner import AsyncFunctionRunner, FunctionRunner, RunnerError
from openagentcore.store import MemoryResultStore

Kind = Literal["sync", "async"]
Failure = Literal["502", "html"]

#: Generous, for a loaded machine: the serves under test give up after 1.5 s.
_RETURNS_WITHIN = 60.0


class _FailingServer:
    """Answers every request the same failing way, and counts them by path."""

    def __init__(self, failure: Failure) -> None:
        self.requests: list[str] = []
        lock = threading.Lock()
        requests = self.requests

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                with lock:
                    requests.append(self.path)
                if failure == "502":
                    body = b"<html><body>Bad gateway</body></html>"
                    self.send_response(502)
                else:
                    body = b"<!doctype html><html><body>The app</body></html>"
                    self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://user:hunter2@127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> _FailingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def stream_opens(self) -> int:
        return sum(1 for path in self.requests if path.endswith("/stream"))


@pytest.fixture(params=["sync", "async"])
def kind(request: pytest.FixtureRequest) -> Kind:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(params=["502", "html"])
def failing_server(request: pytest.FixtureRequest) -> Iterator[_FailingServer]:
    with _FailingServer(request.param) as server:
        yield server


def _serve(kind: Kind, base_url: str, how: str, **options: Any) -> BaseException | None:
    """Run one serve (or recover) in a thread; what it raised, once it returned."""
    options.setdefault("unreachable_timeout", 1.5)
    options.setdefault("reconnect_max_delay", 0.5)
    options.setdefault("poll_interval", 0.05)
    outcome: list[BaseException | None] = []

    def sync() -> None:
        with (
            Client(api_key="sk-test", base_url=base_url, max_retries=0) as client,
            FunctionRunner(client, store=MemoryResultStore(), **options) as runner,
        ):
            if how == "recover":
                runner.recover("sess_x")
            else:
                runner.serve("sess_x", until="idle")

    async def asynchronous() -> None:
        client = AsyncClient(api_key="sk-test", base_url=base_url, max_retries=0)
        async with client, AsyncFunctionRunner(client, store=MemoryResultStore(), **options) as r:
            if how == "recover":
                await r.recover("sess_x")
            else:
                await r.serve("sess_x", until="idle")

    def run() -> None:
        try:
            if kind == "sync":
                sync()
            else:
                with start_blocking_portal() as portal:
                    portal.call(asynchronous)
        except BaseException as exc:
            outcome.append(exc)
        else:
            outcome.append(None)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(_RETURNS_WITHIN)
    assert outcome, f"the serve did not return within {_RETURNS_WITHIN:g} s against a failing server"
    return outcome[0]


def test_a_serve_gives_up_on_a_server_that_answers_but_fails(
    kind: Kind, failing_server: _FailingServer
) -> None:
    error = _serve(kind, failing_server.base_url, "serve")

    assert isinstance(error, (RunnerError, APIError)), error
    message = str(error)
    assert "127.0.0.1" in message
    assert "hunter2" not in message


def test_a_failing_server_is_asked_for_the_stream_at_a_bounded_rate(
    kind: Kind, failing_server: _FailingServer
) -> None:
    _serve(kind, failing_server.base_url, "serve")

    # 1.5 s of backoff from 50 ms doubling to 0.5 s: about ten opens; a stream answered
    # with a page used to be opened again at once, hundreds of times a second.
    assert failing_server.stream_opens() <= 30, failing_server.stream_opens()


def test_reads_of_a_failing_server_warn_once_naming_the_url(
    kind: Kind, failing_server: _FailingServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="openagentcore.runner")

    _serve(kind, failing_server.base_url, "recover")

    reads = [r.getMessage() for r in caplog.records if "Could not read Session" in r.getMessage()]
    assert len(reads) == 1, reads
    assert "127.0.0.1" in reads[0]
    assert "hunter2" not in reads[0]
