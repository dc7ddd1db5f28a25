"""An httpcore network backend on plain asyncio, for the AsyncClient's own connections.

httpx's default async backend goes through anyio, and httpcore's pool asks every pooled
connection "has the server closed you?" on each request. Through anyio that question
builds a dict of socket attributes and makes a ``poll`` system call per connection, and
every read and write opens a cancel scope. Here a connection is an ``asyncio.Protocol``
that already knows whether data, EOF or a lost connection arrived, and a timer is armed
only when a read or write has to wait. Measured against the emulator with 16 requests
in flight, client CPU per request fell from 2.2 to 1.25 ms (``docs/performance.md``).

The transports here are built on public API only: an ``httpx`` transport over an
``httpcore`` connection pool given a network backend. Every stream they open is wrapped
so that a per-request deadline (see :func:`deadline`) bounds each connect, read and
write: a server trickling one byte at a time cannot keep a request alive past it.

Only the clients' own HTTP clients use them (and the clients send through them
directly, see ``_base_client``); an ``http_client`` passed in keeps whatever transport
it was built with, and ``_base_client`` bounds its attempts from outside.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import datetime
import ssl
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from typing import Any, TypeVar, cast

import httpcore
import httpx

__all__ = [
    "AsyncHTTPTransport",
    "AsyncioBackend",
    "SyncHTTPTransport",
    "Wakeup",
    "async_http_transport",
    "deadline",
    "new_async_http_client",
    "new_sync_http_client",
]


#: Unread bytes at which a connection stops reading from the socket until consumed.
_HIGH_WATER = 256 * 1024

T = TypeVar("T")
#: ``asyncio.TimeoutError`` is its own class before Python 3.11.
_TIMEOUTS = (TimeoutError, asyncio.TimeoutError)
#: Seconds before trying a host's next address while the first is still connecting.
_HAPPY_EYEBALLS_DELAY = 0.25
#: httpcore's extra-info names mapped to asyncio's.
_EXTRA_INFO = {
    "ssl_object": "ssl_object",
    "client_addr": "sockname",
    "server_addr": "peername",
    "socket": "socket",
}

#: What httpcore passes to ``socket.setsockopt``.
SocketOption = (
    tuple[int, int, int] | tuple[int, int, bytes | bytearray] | tuple[int, int, None, int]
)


class _Connection(asyncio.Protocol):
    """Buffers what the socket delivers and remembers EOF and loss for the stream."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.eof = False
        self.lost = False
        self.error: BaseException | None = None
        self.reading_paused = False
        self.writing_paused = False
        #: Wake the stream's pending read (data, EOF, loss) or write (drained, loss).
        self.data_arrived = Wakeup()
        self.drained = Wakeup()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) > _HIGH_WATER and not self.reading_paused and self.transport:
            self.reading_paused = True
            self.transport.pause_reading()
        self.data_arrived.wake()

    def eof_received(self) -> bool | None:
        self.eof = True
        self.data_arrived.wake()
        return None  # let the transport close itself

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost, self.error = True, exc
        self.data_arrived.wake()
        self.drained.wake()

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        self.drained.wake()

    @property
    def readable(self) -> bool:
        return bool(self.buffer) or self.eof or self.lost


class Wakeup:
    """One coroutine's wait to be woken (by a protocol callback, or a message for the
    runner's pump); a timer runs only with a timeout."""

    def __init__(self) -> None:
        self._waiter: asyncio.Future[None] | None = None

    def wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def wait(self, timeout: float | None) -> None:
        """Return once woken; raise ``TimeoutError`` after ``timeout`` seconds."""
        loop = asyncio.get_running_loop()
        self._waiter = waiter = loop.create_future()
        timer = None if timeout is None else loop.call_later(max(timeout, 0.0), _expire, waiter)
        try:
            await waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class AsyncioStream(httpcore.AsyncNetworkStream):
    """One TCP (or TLS) connection, read and written the way httpcore expects."""

    def __init__(self, transport: asyncio.Transport, connection: _Connection) -> None:
        self._transport = transport
        self._connection = connection
        self._closed = False

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        connection = self._connection
        while not connection.buffer:
            if self._closed:
                raise httpcore.ReadError("the connection was closed by this client")
            if connection.eof or connection.lost:
                if connection.error is not None:
                    raise httpcore.ReadError(str(connection.error)) from connection.error
                return b""
            try:
                await connection.data_arrived.wait(timeout)
            except TimeoutError as exc:
                raise httpcore.ReadTimeout("timed out reading the response") from exc
        data = bytes(connection.buffer[:max_bytes])
        del connection.buffer[:max_bytes]
        if connection.reading_paused and len(connection.buffer) < _HIGH_WATER // 4:
            connection.reading_paused = False
            self._transport.resume_reading()
        return data

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        connection = self._connection
        if self._closed or connection.lost or self._transport.is_closing():
            raise httpcore.WriteError(str(connection.error or "the connection is closed"))
        self._transport.write(buffer)
        while connection.writing_paused and not connection.lost:
            try:
                await connection.drained.wait(timeout)
            except TimeoutError as exc:
                raise httpcore.WriteTimeout("timed out sending the request") from exc
        if connection.lost and connection.error is not None:
            raise httpcore.WriteError(str(connection.error)) from connection.error

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            # Close politely, give the loop one turn to flush, then drop the socket: a
            # peer that never reads or never answers TLS close_notify must not keep it.
            self._transport.close()
            await asyncio.sleep(0)
            self._transport.abort()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            secured = await _within(
                loop.start_tls(
                    self._transport, self._connection, ssl_context, server_hostname=server_hostname
                ),
                timeout,
                lambda late: late.abort() if late is not None else None,
            )
            if secured is None:  # the connection closed during the handshake
                raise ConnectionResetError("the connection closed during the TLS handshake")
        except _TIMEOUTS as exc:
            await self.aclose()
            raise httpcore.ConnectTimeout("timed out during the TLS handshake") from exc
        except OSError as exc:  # ssl.SSLError included
            await self.aclose()
            raise httpcore.ConnectError(str(exc)) from exc
        self._connection.transport = secured
        return AsyncioStream(secured, self._connection)

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":  # asked of every idle connection on every request
            return self._connection.readable
        name = _EXTRA_INFO.get(info)
        return self._transport.get_extra_info(name) if name else None


async def _within(
    opening: Awaitable[T], timeout: float | None, discard: Callable[[T], object]
) -> T:
    """What ``opening`` gives, or ``TimeoutError`` after ``timeout`` seconds.

    Not ``asyncio.wait_for``: before Python 3.12 it loses a cancellation that lands as
    ``opening`` completes, and the cancelled task runs on, sends its request and reads
    the answer (a runner's stream reader, cancelled as its serve ended, read its stream
    forever and the serve never returned). Here a cancellation always propagates, and
    what ``opening`` gives too late is ``discard``ed.
    """
    task = asyncio.ensure_future(opening)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    except BaseException:
        _abandon(task, discard)
        raise
    if not done:
        _abandon(task, discard)
        raise TimeoutError
    return task.result()


def _abandon(task: asyncio.Future[T], discard: Callable[[T], object]) -> None:
    def late(finished: asyncio.Future[T]) -> None:
        if not finished.cancelled() and finished.exception() is None:
            discard(finished.result())

    task.cancel()
    task.add_done_callback(late)


async def _connect(
    opening: Callable[[], Awaitable[tuple[asyncio.BaseTransport, _Connection]]],
    timeout: float | None,
    socket_options: Iterable[SocketOption] | None,
) -> AsyncioStream:
    try:
        transport, connection = await _within(
            opening(), timeout, lambda late: cast(asyncio.Transport, late[0]).abort()
        )
    except _TIMEOUTS as exc:  # before OSError: TimeoutError is one
        raise httpcore.ConnectTimeout("timed out connecting") from exc
    except OSError as exc:
        raise httpcore.ConnectError(str(exc)) from exc
    opened = cast(asyncio.Transport, transport)
    try:
        for option in socket_options or ():
            opened.get_extra_info("socket").setsockopt(*option)
    except OSError as exc:
        opened.abort()
        raise httpcore.ConnectError(f"cannot set socket option: {exc}") from exc
    return AsyncioStream(opened, connection)


class AsyncioBackend(httpcore.AsyncNetworkBackend):
    """Opens :class:`AsyncioStream` connections on the running event loop."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        local = (local_address, 0) if local_address else None
        return await _connect(
            lambda: loop.create_connection(
                _Connection,
                host,
                port,
                local_addr=local,
                happy_eyeballs_delay=_HAPPY_EYEBALLS_DELAY,
            ),
            timeout,
            socket_options,
        )

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        return await _connect(
            lambda: loop.create_unix_connection(_Connection, path), timeout, socket_options
        )

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


# Per-request deadlines.

#: Monotonic time by which the current request (or stream event) must be done.
_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "openagentcore_deadline", default=None
)


class _Deadline:
    """The context manager :func:`deadline` returns (a class: it is entered per request
    and per stream read, where a generator-based one costs three times as much)."""

    __slots__ = ("_seconds", "_token")

    def __init__(self, seconds: float | None) -> None:
        self._seconds = seconds

    def __enter__(self) -> None:
        seconds = self._seconds
        self._token = _deadline.set(None if seconds is None else time.monotonic() + seconds)

    def __exit__(self, *exc_info: object) -> None:
        _deadline.reset(self._token)


def deadline(seconds: float | None) -> contextlib.AbstractContextManager[None]:
    """Bound every connect, read and write of our transports in this context to end
    within ``seconds`` from now (``None``: no bound beyond the per-operation timeouts).

    A context variable reaches the streams because httpcore does a request's I/O in
    the caller's thread or task.
    """
    return _Deadline(seconds)


def _clamp(timeout: float | None, expired: type[httpcore.TimeoutException]) -> float | None:
    """``timeout`` shortened to what is left before the deadline."""
    end = _deadline.get()
    if end is None:
        return timeout
    left = end - time.monotonic()
    if left <= 0:
        raise expired("the request's deadline passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _clamp(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _clamp(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        secured = self._stream.start_tls(
            ssl_context, server_hostname, _clamp(timeout, httpcore.ConnectTimeout)
        )
        return _DeadlineStream(secured)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    def __init__(self, backend: httpcore.NetworkBackend) -> None:
        self._backend = backend

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.NetworkStream:
        stream = self._backend.connect_tcp(
            host, port, _clamp(timeout, httpcore.ConnectTimeout), local_address, socket_options
        )
        return _DeadlineStream(stream)

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.NetworkStream:
        stream = self._backend.connect_unix_socket(
            path, _clamp(timeout, httpcore.ConnectTimeout), socket_options
        )
        return _DeadlineStream(stream)

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


class _AsyncDeadlineStream(httpcore.AsyncNetworkStream):
    def __init__(self, stream: httpcore.AsyncNetworkStream) -> None:
        self._stream = stream

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._stream.read(max_bytes, _clamp(timeout, httpcore.ReadTimeout))

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._stream.write(buffer, _clamp(timeout, httpcore.WriteTimeout))

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        secured = await self._stream.start_tls(
            ssl_context, server_hostname, _clamp(timeout, httpcore.ConnectTimeout)
        )
        return _AsyncDeadlineStream(secured)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)

    @property
    def inner(self) -> httpcore.AsyncNetworkStream:
        """The wrapped stream (an :class:`AsyncioStream` on the asyncio backend)."""
        return self._stream


class _AsyncDeadlineBackend(httpcore.AsyncNetworkBackend):
    def __init__(self, backend: httpcore.AsyncNetworkBackend) -> None:
        self.backend = backend

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        stream = await self.backend.connect_tcp(
            host, port, _clamp(timeout, httpcore.ConnectTimeout), local_address, socket_options
        )
        return _AsyncDeadlineStream(stream)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        stream = await self.backend.connect_unix_socket(
            path, _clamp(timeout, httpcore.ConnectTimeout), socket_options
        )
        return _AsyncDeadlineStream(stream)

    async def sleep(self, seconds: float) -> None:
        await self.backend.sleep(seconds)


# httpx transports over httpcore pools.

#: httpcore's exceptions and the httpx ones httpx's own transports raise for them.
_EXCEPTIONS: dict[type[Exception], type[httpx.TransportError]] = {
    httpcore.ConnectTimeout: httpx.ConnectTimeout,
    httpcore.ReadTimeout: httpx.ReadTimeout,
    httpcore.WriteTimeout: httpx.WriteTimeout,
    httpcore.PoolTimeout: httpx.PoolTimeout,
    httpcore.TimeoutException: httpx.TimeoutException,
    httpcore.ConnectError: httpx.ConnectError,
    httpcore.ReadError: httpx.ReadError,
    httpcore.WriteError: httpx.WriteError,
    httpcore.NetworkError: httpx.NetworkError,
    httpcore.ProxyError: httpx.ProxyError,
    httpcore.UnsupportedProtocol: httpx.UnsupportedProtocol,
    httpcore.LocalProtocolError: httpx.LocalProtocolError,
    httpcore.RemoteProtocolError: httpx.RemoteProtocolError,
    httpcore.ProtocolError: httpx.ProtocolError,
}


class _HTTPXErrors:
    """Raises httpcore's exceptions as the httpx ones httpx's own transports raise
    (a class: it is entered twice per request, where a generator costs more)."""

    __slots__ = ("_request",)

    def __init__(self, request: httpx.Request | None) -> None:
        self._request = request

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        if not isinstance(exc, Exception):
            return
        for kind in type(exc).__mro__:
            mapped = _EXCEPTIONS.get(kind)
            if mapped is not None:
                raise mapped(str(exc), request=self._request) from exc


def _core_request(request: httpx.Request) -> httpcore.Request:
    url = request.url
    return httpcore.Request(
        method=request.method,
        url=httpcore.URL(
            scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path
        ),
        headers=request.headers.raw,
        content=request.stream,
        extensions=request.extensions,
    )


class _Body:
    """What both bodies share: the request their errors name, and the response whose
    ``elapsed`` they record when closed, as httpx's client does for its transports (the
    SDK may send through a transport directly)."""

    def __init__(self, request: httpx.Request, started: float) -> None:
        self._request = request
        self._started = started
        self.response: httpx.Response | None = None

    def _record_elapsed(self) -> None:
        if self.response is not None:
            elapsed = time.perf_counter() - self._started
            self.response.elapsed = datetime.timedelta(seconds=elapsed)


class _SyncBody(_Body, httpx.SyncByteStream):
    def __init__(self, stream: Iterable[bytes], request: httpx.Request, started: float) -> None:
        super().__init__(request, started)
        self._stream = stream

    def __iter__(self) -> Iterator[bytes]:
        with _HTTPXErrors(self._request):
            yield from self._stream

    def close(self) -> None:
        self._record_elapsed()
        close = getattr(self._stream, "close", None)
        if close is not None:
            close()


class _AsyncBody(_Body, httpx.AsyncByteStream):
    def __init__(self, stream: Any, request: httpx.Request, started: float) -> None:
        super().__init__(request, started)
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _HTTPXErrors(self._request):
            async for part in self._stream:
                yield part

    async def aclose(self) -> None:
        self._record_elapsed()
        aclose = getattr(self._stream, "aclose", None)
        if aclose is not None:
            await aclose()


def _response(request: httpx.Request, answer: httpcore.Response, body: _Body) -> httpx.Response:
    response = httpx.Response(
        status_code=answer.status,
        headers=answer.headers,
        stream=cast(httpx.SyncByteStream | httpx.AsyncByteStream, body),
        extensions=answer.extensions,
        request=request,
    )
    body.response = response
    return response


def _pool_options(limits: httpx.Limits, ssl_context: ssl.SSLContext) -> dict[str, Any]:
    return {
        "ssl_context": ssl_context,
        "max_connections": limits.max_connections,
        "max_keepalive_connections": limits.max_keepalive_connections,
        "keepalive_expiry": limits.keepalive_expiry,
    }


class SyncHTTPTransport(httpx.BaseTransport):
    """An httpx transport over an httpcore pool whose streams honour :func:`deadline`."""

    def __init__(self, limits: httpx.Limits, ssl_context: ssl.SSLContext) -> None:
        self.pool = httpcore.ConnectionPool(
            network_backend=_DeadlineBackend(httpcore.SyncBackend()),
            **_pool_options(limits, ssl_context),
        )

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        started = time.perf_counter()
        with _HTTPXErrors(request):
            answer = self.pool.handle_request(_core_request(request))
        body = _SyncBody(cast(Iterable[bytes], answer.stream), request, started)
        return _response(request, answer, body)

    def close(self) -> None:
        self.pool.close()


class AsyncHTTPTransport(httpx.AsyncBaseTransport):
    """An httpx transport over an httpcore pool whose streams honour :func:`deadline`.

    On asyncio it uses :class:`AsyncioBackend` (unless ``native_asyncio`` is false);
    under any other event loop (trio) it uses httpcore's anyio backend, as httpx does.
    """

    def __init__(
        self, limits: httpx.Limits, ssl_context: ssl.SSLContext, *, native_asyncio: bool = True
    ) -> None:
        self._options = _pool_options(limits, ssl_context)
        self.pool = self._new_pool(AsyncioBackend() if native_asyncio else None)
        self._other_pool: httpcore.AsyncConnectionPool | None = None

    def _new_pool(
        self, backend: httpcore.AsyncNetworkBackend | None
    ) -> httpcore.AsyncConnectionPool:
        return httpcore.AsyncConnectionPool(
            network_backend=_AsyncDeadlineBackend(backend or httpcore.AnyIOBackend()),
            **self._options,
        )

    def _pool_for_this_loop(self) -> httpcore.AsyncConnectionPool:
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # trio, or another loop that asyncio cannot see
            if self._other_pool is None:
                self._other_pool = self._new_pool(None)
            return self._other_pool
        return self.pool

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        started = time.perf_counter()
        pool = self._pool_for_this_loop()
        with _HTTPXErrors(request):
            answer = await pool.handle_async_request(_core_request(request))
        return _response(request, answer, _AsyncBody(answer.stream, request, started))

    async def aclose(self) -> None:
        await self.pool.aclose()
        if self._other_pool is not None:
            await self._other_pool.aclose()


def environment_proxies() -> bool:
    """Whether the environment names a proxy that httpx would route requests through."""
    return any(scheme in ("http", "https", "all") for scheme in urllib.request.getproxies())


def async_http_transport(
    limits: httpx.Limits, ssl_context: ssl.SSLContext, *, native_asyncio: bool = True
) -> AsyncHTTPTransport:
    """The transport the AsyncClient's own HTTP clients use."""
    return AsyncHTTPTransport(limits, ssl_context, native_asyncio=native_asyncio)


def new_async_http_client(
    *,
    timeout: httpx.Timeout,
    limits: httpx.Limits,
    ssl_context: ssl.SSLContext,
    native_asyncio: bool = True,
) -> tuple[httpx.AsyncClient, AsyncHTTPTransport | None]:
    """An ``httpx.AsyncClient`` on :class:`AsyncHTTPTransport`, and that transport.

    httpx honours the ``HTTP(S)_PROXY`` variables only in transports it builds itself,
    so when one is set the client keeps httpx's own transport, which :func:`deadline`
    does not reach (``_base_client`` bounds its attempts from outside), and no
    transport is returned.
    """
    if environment_proxies():
        return httpx.AsyncClient(timeout=timeout, limits=limits, verify=ssl_context), None
    transport = async_http_transport(limits, ssl_context, native_asyncio=native_asyncio)
    return httpx.AsyncClient(timeout=timeout, transport=transport), transport


def new_sync_http_client(
    *, timeout: httpx.Timeout, limits: httpx.Limits, ssl_context: ssl.SSLContext
) -> tuple[httpx.Client, SyncHTTPTransport | None]:
    """The blocking twin of :func:`new_async_http_client`."""
    if environment_proxies():
        return httpx.Client(timeout=timeout, limits=limits, verify=ssl_context), None
    transport = SyncHTTPTransport(limits, ssl_context)
    return httpx.Client(timeout=timeout, transport=transport), transport
