"""Hostile HTTP servers for the client's tests: raw sockets on 127.0.0.1.

A :class:`HostileServer` accepts connections on a thread, parses just enough of each
request (head and ``Content-Length`` body) to record it, and hands the socket to a
handler that may answer anything at any pace: redirects, trickled bytes, bombs, loops.
Pauses use ``threading.Event.wait`` because the client conftest records ``time.sleep``
instead of sleeping.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

#: Long enough for any exchange here; a server thread never outlives a test by more.
SAFETY = 10.0


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


Handler = Callable[[socket.socket, Request, "HostileServer"], None]


@dataclass
class HostileServer:
    handler: Handler
    requests: list[Request] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._workers: list[threading.Thread] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def pause(self, seconds: float) -> bool:
        """Wait ``seconds`` (really: the conftest patches ``time.sleep``); ``True`` once
        the test is over and the handler should give up."""
        return self.stop.wait(seconds)

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            worker = threading.Thread(target=self._handle, args=(conn,), daemon=True)
            self._workers.append(worker)
            worker.start()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(SAFETY)
            try:
                while not self.stop.is_set():
                    request = _read_request(conn)
                    if request is None:
                        return
                    self.requests.append(request)
                    self.handler(conn, request, self)
                    # Every answer here closes its connection: no keep-alive state.
                    return
            except OSError:
                return

    def __enter__(self) -> HostileServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self._listener.close()
        self._thread.join(SAFETY)
        for worker in self._workers:
            worker.join(SAFETY)


def _read_request(conn: socket.socket) -> Request | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        rest += chunk
    return Request(method, path, headers, rest[:length])


def response_bytes(
    status: int,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    *,
    content_type: str = "application/json",
) -> bytes:
    """A complete HTTP/1.1 response that closes the connection."""
    all_headers = {
        "Content-Type": content_type,
        "Content-Length": str(len(body)),
        "Connection": "close",
        **(headers or {}),
    }
    head = f"HTTP/1.1 {status} X\r\n" + "".join(f"{k}: {v}\r\n" for k, v in all_headers.items())
    return head.encode() + b"\r\n" + body


def answer(status: int, payload: Any = None, headers: dict[str, str] | None = None) -> Handler:
    """A handler that sends one fixed response (JSON unless ``payload`` is bytes)."""
    body = (
        payload
        if isinstance(payload, bytes)
        else b""
        if payload is None
        else json.dumps(payload).encode()
    )

    def handle(conn: socket.socket, request: Request, server: HostileServer) -> None:
        conn.sendall(response_bytes(status, body, headers))

    return handle


def trickle(data: bytes, every: float) -> Handler:
    """A handler that sends ``data`` one byte at a time, ``every`` seconds apart."""

    def handle(conn: socket.socket, request: Request, server: HostileServer) -> None:
        for index in range(len(data)):
            conn.sendall(data[index : index + 1])
            if server.pause(every):
                return

    return handle


def event_stream(frames: bytes, *, then_hold: bool = True) -> Handler:
    """A handler that opens an event stream, sends ``frames`` and keeps it open."""

    def handle(conn: socket.socket, request: Request, server: HostileServer) -> None:
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Connection: close\r\n\r\n" + frames
        )
        if then_hold:
            server.pause(SAFETY)

    return handle


def endless_line(chunk: int = 65536) -> Handler:
    """An event stream whose first ``data:`` line never ends, sent as fast as read."""

    def handle(conn: socket.socket, request: Request, server: HostileServer) -> None:
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\ndata: "
        )
        filler = b"x" * chunk
        while not server.stop.is_set():
            conn.sendall(filler)

    return handle


def gzip_bomb(inflated: int) -> bytes:
    """A gzip body of zeros that inflates to ``inflated`` bytes (about 1000:1)."""
    return gzip.compress(b"\0" * inflated, compresslevel=9)


def nested(depth: int) -> bytes:
    """``{"a":[[[...]]]}``: a JSON object with ``depth`` nested arrays inside."""
    return b'{"a":' + b"[" * depth + b"]" * depth + b"}"


@contextlib.contextmanager
def serving(handler: Handler) -> Iterator[HostileServer]:
    with HostileServer(handler) as server:
        yield server
