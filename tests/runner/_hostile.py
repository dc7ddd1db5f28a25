"""A hostile proxy on loopback in front of ``LocalCore``, for answers the emulator
cannot give: refusals, outages and 409s on result posts, and model arguments it cannot
carry (lone surrogates, JSON nested a thousand deep, sent as a JSON string as real
servers do)."""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

#: Decides the answer to a request instead of the emulator; ``None`` forwards it.
Rule = Callable[[str, str, bytes], Response | None]

_HOP_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "content-encoding"}


def api_error(
    status: int, code: str, message: str, type: str = "invalid_request_error"
) -> Response:
    """An error envelope as the contract shapes it (error-codes.md, "Error envelope")."""
    body = {"error": {"type": type, "code": code, "message": message, "param": None}}
    return JSONResponse(body, status_code=status)


def is_result_post(method: str, path: str, body: bytes) -> bool:
    return method == "POST" and path.endswith("/events") and b"tool_result" in body


class HostileProxy:
    """Forwards to ``upstream`` unless ``rule`` answers; ``rewrite`` edits every
    response body (SSE line by line) on the way back."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.rule: Rule = lambda method, path, body: None
        self.rewrite: Callable[[bytes], bytes] = lambda data: data
        self.answered: list[tuple[str, str, int]] = []
        self._lock = threading.Lock()
        app = Starlette(
            routes=[Route("/{path:path}", self._handle, methods=["GET", "POST", "DELETE"])]
        )
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="hostile-proxy")

    def start(self) -> HostileProxy:
        self._thread.start()
        deadline = time.monotonic() + 20
        while not self._server.started:
            assert time.monotonic() < deadline, "the hostile proxy did not start"
            time.sleep(0.01)
        return self

    @property
    def base_url(self) -> str:
        port = self._server.servers[0].sockets[0].getsockname()[1]
        prefix = httpx.URL(self.upstream).path
        return f"http://127.0.0.1:{port}{prefix}"

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(20)

    def statuses(self, predicate: Callable[[str, str], bool]) -> list[int]:
        with self._lock:
            return [s for m, p, s in self.answered if predicate(m, p)]

    def _log(self, method: str, path: str, status: int) -> None:
        with self._lock:
            self.answered.append((method, path, status))

    async def _handle(self, request: Request) -> Response:
        body = await request.body()
        path = request.url.path
        ruled = self.rule(request.method, path, body)
        if ruled is not None:
            self._log(request.method, path, ruled.status_code)
            return ruled
        upstream = httpx.URL(self.upstream)
        url = upstream.copy_with(path=path, query=request.url.query.encode() or None)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_HEADERS}
        client = httpx.AsyncClient(timeout=None)
        forwarded = await client.send(
            client.build_request(request.method, url, headers=headers, content=body),
            stream=True,
        )
        self._log(request.method, path, forwarded.status_code)
        out_headers = {k: v for k, v in forwarded.headers.items() if k.lower() not in _HOP_HEADERS}
        if forwarded.headers.get("content-type", "").startswith("text/event-stream"):

            async def lines() -> AsyncIterator[bytes]:
                try:
                    async for line in forwarded.aiter_lines():
                        yield self.rewrite(line.encode()) + b"\n"
                finally:
                    await forwarded.aclose()
                    await client.aclose()

            return StreamingResponse(
                lines(), status_code=forwarded.status_code, headers=out_headers
            )
        data = await forwarded.aread()
        await forwarded.aclose()
        await client.aclose()
        return Response(self.rewrite(data), status_code=forwarded.status_code, headers=out_headers)


def replace_arguments(placeholder: dict[str, Any], json_text: str) -> Callable[[bytes], bytes]:
    """A rewrite that sends the arguments object ``placeholder`` as the JSON string
    ``json_text`` (compact JSON, as the emulator writes it)."""
    import json

    original = b'"arguments":' + json.dumps(placeholder, separators=(",", ":")).encode()
    hostile = b'"arguments":' + json.dumps(json_text).encode()

    def rewrite(data: bytes) -> bytes:
        return data.replace(original, hostile)

    return rewrite
