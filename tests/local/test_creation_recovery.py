"""Item 1: a Session creation retried across response modes returns the committed Session.

The emulator keeps one retry identity for a creation whatever ``stream`` says, and the
SDK's streamed ``sessions.create`` uses that to recover a Session its stream lost.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from openagentcore import APIConnectionError, AsyncClient, Client
from openagentcore.local import LocalCore

from ._support import Api, iter_sse


def _stream_create(api: Api, body: dict[str, Any], key: str) -> list[tuple[str, str]]:
    request = api.http.build_request(
        "POST", "/agents/sessions", json={**body, "stream": True}, headers={"Idempotency-Key": key}
    )
    response = api.http.send(request, stream=True)
    try:
        assert response.status_code == 201, response.read()
        return list(iter_sse(response))
    finally:
        response.close()


@pytest.mark.parametrize("plain_stream", [False, None])
def test_streamed_creation_is_recovered_with_stream_false(
    api: Api, plain_stream: bool | None
) -> None:
    """sessions-events.md, "Creation streaming": a lost Session ID is recovered by
    repeating the request with the same key and ``stream: false``; wire-semantics.md,
    "Creation retries": the same key and request answer 201 with the Session."""
    body: dict[str, Any] = {"environment": {"type": "none"}, "input": "hello"}
    key = f"mode-key-1-{plain_stream}"
    frames = _stream_create(api, body, key)
    created = next(payload for kind, payload in frames if kind == "event")
    session_id = httpx.Response(200, content=created).json()["session"]["id"]

    repeat = dict(body) if plain_stream is None else {**body, "stream": plain_stream}
    response = api.http.post("/agents/sessions", json=repeat, headers={"Idempotency-Key": key})

    assert response.status_code == 201, response.text
    assert response.json()["id"] == session_id
    turns = api.http.get(f"/agents/sessions/{session_id}/turns").json()["data"]
    assert len(turns) == 1, "the retry admitted the input again"


def test_plain_creation_retried_as_a_stream_sends_only_the_comment(api: Api) -> None:
    """wire-semantics.md, "Creation retries": a ``stream=true`` retry of a committed
    creation answers 201 with no events, whichever mode created it."""
    body: dict[str, Any] = {"environment": {"type": "none"}, "input": "hello"}
    first = api.http.post("/agents/sessions", json=body, headers={"Idempotency-Key": "mode-key-2"})
    assert first.status_code == 201

    frames = _stream_create(api, body, "mode-key-2")

    assert frames == [("comment", "connected")]
    sessions = api.http.get("/agents/sessions", params={"limit": 100}).json()["data"]
    assert sum(s["id"] == first.json()["id"] for s in sessions) == 1


def test_sdk_stream_of_a_retried_creation_recovers_the_session(core: LocalCore) -> None:
    """A retried streamed creation streams nothing; the SDK fetches the Session."""
    with Client(base_url=core.base_url, api_key=core.api_key) as client:
        first = client.sessions.create(input="hi", idempotency_key="sdk-mode-key")

        with client.sessions.create(input="hi", stream=True, idempotency_key="sdk-mode-key") as s:
            events = list(s)

        assert events == []
        assert s.session is not None
        assert s.session.id == first.id


class _BreakingProxy:
    """Forwards requests to the emulator, but answers the first streamed creation with
    the stream's headers and first comment, then drops the connection: a stream that
    broke after the server admitted the creation."""

    def __init__(self, upstream: str) -> None:
        self.upstream = httpx.Client(base_url=upstream, timeout=10)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.broken = 0
        self.bodies: list[bytes] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            with connection:
                self._handle(connection)

    def _handle(self, connection: socket.socket) -> None:
        reader = connection.makefile("rb")
        request_line = reader.readline().decode()
        if not request_line:
            return
        method, target, _ = request_line.split(" ", 2)
        headers: dict[str, str] = {}
        while (line := reader.readline().decode().strip()) != "":
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        content = reader.read(int(headers.get("content-length", "0")))
        self.bodies.append(content)
        forwarded = {k: v for k, v in headers.items() if k not in ("host", "connection")}
        request = self.upstream.build_request(method, target, headers=forwarded, content=content)
        response = self.upstream.send(request, stream=True)
        try:
            if headers.get("accept") == "text/event-stream" and self.broken == 0:
                self.broken += 1
                chunk = b": connected\n\n"
                connection.sendall(
                    b"HTTP/1.1 201 Created\r\ncontent-type: text/event-stream\r\n"
                    b"transfer-encoding: chunked\r\n\r\n"
                    + f"{len(chunk):x}\r\n".encode()
                    + chunk
                    + b"\r\n"
                )
                return  # the connection drops mid-stream
            payload = response.read()
            head = [f"HTTP/1.1 {response.status_code} X"]
            head += [
                f"{k}: {v}"
                for k, v in response.headers.items()
                if k.lower() not in ("transfer-encoding", "content-length", "connection")
            ]
            head += [f"content-length: {len(payload)}", "connection: close"]
            connection.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + payload)
        finally:
            response.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        self.listener.close()
        self._thread.join(timeout=5)
        self.upstream.close()


@pytest.fixture
def breaking_proxy(core: LocalCore) -> Iterator[_BreakingProxy]:
    proxy = _BreakingProxy(core.base_url)
    yield proxy
    proxy.close()


def test_sdk_stream_that_breaks_after_admission_recovers_the_session(
    core: LocalCore, breaking_proxy: _BreakingProxy
) -> None:
    """sessions-events.md, "Creation streaming": after a lost stream, the same key with
    ``stream: false`` returns the committed Session; nothing is admitted twice."""
    with Client(base_url=breaking_proxy.url, api_key=core.api_key, max_retries=0) as client:
        stream = client.sessions.create(input="hello", stream=True)
        with pytest.raises(APIConnectionError), contextlib.closing(stream):
            list(stream)

        assert stream.session is not None
        recovered = client.sessions.retrieve(stream.session.id)
    assert recovered.id == stream.session.id
    assert b'"stream":true' in breaking_proxy.bodies[0]
    assert b'"stream":false' in breaking_proxy.bodies[1]
    api = Api(core)
    try:
        turns = api.http.get(f"/agents/sessions/{recovered.id}/turns").json()["data"]
    finally:
        api.close()
    assert len(turns) == 1


@pytest.mark.anyio
async def test_async_sdk_stream_of_a_retried_creation_recovers_the_session(
    core: LocalCore,
) -> None:
    async with AsyncClient(base_url=core.base_url, api_key=core.api_key) as client:
        first = await client.sessions.create(input="hi", idempotency_key="async-mode-key")
        stream = await client.sessions.create(
            input="hi", stream=True, idempotency_key="async-mode-key"
        )
        async with stream:
            events = [event async for event in stream]
    assert events == []
    assert stream.session is not None
    assert stream.session.id == first.id
