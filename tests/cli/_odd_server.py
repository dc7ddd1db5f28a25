"""A hostile proxy on loopback in front of ``LocalCore`` for the operator-input tests:
answers the emulator would never give (redirects, refusals, HTML error pages, bodies
that are not JSON, Sessions rewritten on the way back), modelled on
``tests/runner/_hostile.py``."""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Callable

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

#: Decides the answer to a request instead of the emulator; ``None`` forwards it.
Rule = Callable[[str, str, bytes], Response | None]

_HOP_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "content-encoding"}


def api_error(status: int, code: str, message: str) -> Response:
    body = {
        "error": {"type": "invalid_request_error", "code": code, "message": message, "param": None}
    }
    return JSONResponse(body, status_code=status)


def is_session_read(method: str, path: str) -> bool:
    return method == "GET" and "/agents/sessions/" in path and path.rstrip("/").count("/") == 4


def is_result_post(method: str, path: str, body: bytes) -> bool:
    return method == "POST" and path.endswith("/events") and b"tool_result" in body


class OddProxy:
    """Forwards to ``upstream`` unless ``rule`` answers; ``rewrite`` edits every JSON
    answer's body on the way back (``None`` for event streams)."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.rule: Rule = lambda method, path, body: None
        self.rewrite: Callable[[str, str, bytes], bytes] = lambda method, path, data: data
        self.seen: list[tuple[str, str, bytes]] = []
        self._lock = threading.Lock()
        app = Starlette(
            routes=[Route("/{path:path}", self._handle, methods=["GET", "POST", "DELETE"])]
        )
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="critical", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="odd-proxy", daemon=True)

    def start(self) -> OddProxy:
        self._thread.start()
        deadline = time.monotonic() + 20
        while not self._server.started:
            assert time.monotonic() < deadline, "the odd proxy did not start"
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

    def requests(self, predicate: Callable[[str, str, bytes], bool]) -> list[bytes]:
        with self._lock:
            return [body for method, path, body in self.seen if predicate(method, path, body)]

    async def _handle(self, request: Request) -> Response:
        body = await request.body()
        path = request.url.path
        with self._lock:
            self.seen.append((request.method, path, body))
        ruled = self.rule(request.method, path, body)
        if ruled is not None:
            return ruled
        upstream = httpx.URL(self.upstream)
        url = upstream.copy_with(path=path, query=request.url.query.encode() or None)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_HEADERS}
        client = httpx.AsyncClient(timeout=None)
        forwarded = await client.send(
            client.build_request(request.method, url, headers=headers, content=body),
            stream=True,
        )
        out_headers = {k: v for k, v in forwarded.headers.items() if k.lower() not in _HOP_HEADERS}
        if forwarded.headers.get("content-type", "").startswith("text/event-stream"):

            async def lines() -> AsyncIterator[bytes]:
                try:
                    async for line in forwarded.aiter_lines():
                        yield line.encode() + b"\n"
                finally:
                    await forwarded.aclose()
                    await client.aclose()

            return StreamingResponse(
                lines(), status_code=forwarded.status_code, headers=out_headers
            )
        data = await forwarded.aread()
        await forwarded.aclose()
        await client.aclose()
        data = self.rewrite(request.method, path, data)
        return Response(data, status_code=forwarded.status_code, headers=out_headers)
