"""An httpcore network backend on plain asyncio, for the AsyncClient's own connections.

httpx's default async backend goes through anyio, and httpcore's pool asks every pooled
connection "has the server closed you?" on each request. Through anyio that question
builds a dict of socket attributes and makes a ``poll`` system call per connection, and
every read and write opens a cancel scope. Here a connection is an ``asyncio.Protocol``
that already knows whether data, EOF or a lost connection arrived, and a timer is armed
only when a read or write has to wait. Measured against the emulator with 16 requests
in flight, client CPU per request fell from 2.2 to 1.25 ms (``docs/performance.md``).

Only the AsyncClient's own HTTP clients use it; an ``http_client`` passed in keeps
whatever transport it was built with.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import urllib.request
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, cast

import httpcore
import httpx

__all__ = ["AsyncioBackend", "async_http_transport", "new_async_http_client"]

logger = logging.getLogger("openagentcore")

#: Unread bytes at which a connection stops reading from the socket until consumed.
_HIGH_WATER = 256 * 1024
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
        self.data_arrived = _Wakeup()
        self.drained = _Wakeup()

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


class _Wakeup:
    """One coroutine's wait for a protocol callback; a timer runs only with a timeout."""

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
            secured = await asyncio.wait_for(
                loop.start_tls(
                    self._transport, self._connection, ssl_context, server_hostname=server_hostname
                ),
                timeout,
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


async def _connect(
    opening: Callable[[], Awaitable[tuple[asyncio.BaseTransport, _Connection]]],
    timeout: float | None,
    socket_options: Iterable[SocketOption] | None,
) -> AsyncioStream:
    try:
        transport, connection = await asyncio.wait_for(opening(), timeout)
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


def new_async_http_client(
    *, timeout: httpx.Timeout, limits: httpx.Limits, ssl_context: ssl.SSLContext
) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` whose connections use :class:`AsyncioBackend`.

    httpx honours the ``HTTP(S)_PROXY`` variables only in transports it builds itself,
    so when one is set the client keeps httpx's own transport (and backend).
    """
    if environment_proxies():
        return httpx.AsyncClient(timeout=timeout, limits=limits, verify=ssl_context)
    return httpx.AsyncClient(timeout=timeout, transport=async_http_transport(limits, ssl_context))


def environment_proxies() -> bool:
    """Whether the environment names a proxy that httpx would route requests through."""
    return any(scheme in ("http", "https", "all") for scheme in urllib.request.getproxies())


def async_http_transport(
    limits: httpx.Limits, ssl_context: ssl.SSLContext
) -> httpx.AsyncHTTPTransport:
    """httpx's transport with its connection pool rebuilt on :class:`AsyncioBackend`.

    httpx has no public way to choose httpcore's network backend, so this replaces the
    transport's pool, a private attribute. If a later httpx stores it differently, the
    transport keeps httpx's own pool and works as before, only slower (logged at debug
    level; ``tests/client/test_network.py`` fails on such an httpx).
    """
    transport = httpx.AsyncHTTPTransport(verify=ssl_context, limits=limits)
    if not isinstance(getattr(transport, "_pool", None), httpcore.AsyncConnectionPool):
        logger.debug("httpx %s keeps its pool elsewhere; using its own backend", httpx.__version__)
        return transport
    transport._pool = httpcore.AsyncConnectionPool(
        ssl_context=ssl_context,
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        network_backend=AsyncioBackend(),
    )
    return transport
