"""The asyncio network backend (``openagentcore._network``) against real local servers.

Every test talks over real sockets to a threaded HTTP server on 127.0.0.1, because the
backend's job is exactly what a mocked transport skips: buffering, EOF, flow control,
timeouts and TLS. The conftest patches ``time.sleep`` and ``asyncio.sleep`` to record
instead of sleeping, so servers and tests synchronise through events, never sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpcore
import httpx
import pytest

from openagentcore import AsyncClient
from openagentcore._base_client import MAX_CONCURRENT_ASYNC_REQUESTS, STREAM_CONNECTION_LIMITS
from openagentcore._network import (
    _HIGH_WATER,
    AsyncHTTPTransport,
    AsyncioBackend,
    AsyncioStream,
    _connect,
    _Connection,
    async_http_transport,
)

from ._support import API_KEY, BASE_URL

pytestmark = pytest.mark.anyio

#: Several MB that no chunk reordering or loss can leave unchanged.
BIG_BODY = random.Random(20240601).randbytes(6 * 1024 * 1024)
#: Sizes of the chunks ``/chunked`` sends, small and large, with a flush after each.
CHUNK_SIZES = [1, 7, 100, 1000, 4096, 10_000, 65_536, 100_000] * 4
CHUNKED_BODY = BIG_BODY[: sum(CHUNK_SIZES)]
#: What ``/stall`` sends before it stops: headers and half the promised body.
STALL_BODY = b"0123456789" * 100
LIMITS = httpx.Limits(max_connections=16, max_keepalive_connections=16)
#: Long enough for any local exchange; a hang fails the test instead of the suite.
SAFETY_TIMEOUT = 5.0


class _Handler(BaseHTTPRequestHandler):
    """Routes of the local test server; HTTP/1.1, so connections stay open by default."""

    protocol_version = "HTTP/1.1"
    #: Headers and body go out as separate writes; Nagle plus delayed ACKs would add
    #: 40 ms to every keep-alive request.
    disable_nagle_algorithm = True
    server: _LocalServer

    def setup(self) -> None:
        super().setup()
        with self.server.lock:
            self.server.connections_opened += 1

    def log_message(self, format: str, *args: Any) -> None:
        """Keep the test output quiet."""

    def do_GET(self) -> None:
        if self.path == "/ok":
            self._answer(b"ok")
        elif self.path == "/ok-then-close":
            # Keep-alive headers, then a close: the client pools a connection that dies idle.
            self._answer(b"ok")
            self.close_connection = True
        elif self.path == "/big":
            self._answer(BIG_BODY)
        elif self.path == "/chunked":
            self._answer_chunked()
        elif self.path == "/hang":
            self.server.release.wait(SAFETY_TIMEOUT)
            self.close_connection = True
        elif self.path == "/stall":
            self.send_response(200)
            self.send_header("Content-Length", str(2 * len(STALL_BODY)))
            self.end_headers()
            self.wfile.write(STALL_BODY)
            self.wfile.flush()
            self.server.stalled.set()
            self.server.release.wait(SAFETY_TIMEOUT)
            self.close_connection = True
        else:
            self.send_error(404)

    def do_POST(self) -> None:
        if self.path == "/echo-when-released":
            self.server.release.wait(SAFETY_TIMEOUT)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self._answer(body, self.headers.get("Content-Type", "application/octet-stream"))

    def _answer(self, body: bytes, content_type: str = "application/octet-stream") -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _answer_chunked(self) -> None:
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        offset = 0
        for size in CHUNK_SIZES:
            chunk = CHUNKED_BODY[offset : offset + size]
            offset += size
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")


class _LocalServer(ThreadingHTTPServer):
    """A threaded server on a free 127.0.0.1 port that reports what it did."""

    #: The default backlog of 5 drops connections when a test opens many at once.
    request_queue_size = 128
    daemon_threads = True

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        if tls is not None:
            self.socket = tls.wrap_socket(self.socket, server_side=True)
        self.scheme = "https" if tls else "http"
        self.port: int = self.server_address[1]
        self.lock = threading.Lock()
        #: Connections accepted (one handler each), to tell reuse from reconnection.
        self.connections_opened = 0
        #: Set at teardown so handlers that never answer return.
        self.release = threading.Event()
        #: Set once ``/stall`` has sent its first half.
        self.stalled = threading.Event()
        #: Released once per connection, after the server has closed the socket.
        self.closed_connections = threading.Semaphore(0)

    def url(self, path: str) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}{path}"

    def shutdown_request(self, request: Any) -> None:
        super().shutdown_request(request)
        self.closed_connections.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients that give up (timeouts, cancellation, refused certificates) are expected."""


@contextlib.contextmanager
def _serving(tls: ssl.SSLContext | None = None) -> Iterator[_LocalServer]:
    server = _LocalServer(tls)
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()
        thread.join(SAFETY_TIMEOUT)


@pytest.fixture
def server() -> Iterator[_LocalServer]:
    with _serving() as local_server:
        yield local_server


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key, made fresh by ``openssl``."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed; it makes the test certificate")
    directory = tmp_path_factory.mktemp("tls")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-nodes", "-days", "2"),
            *("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"),
            *("-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1"),
            *("-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


@pytest.fixture
def tls_server(certificate: tuple[Path, Path]) -> Iterator[_LocalServer]:
    cert, key = certificate
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    with _serving(context) as local_server:
        yield local_server


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client on the module's transport, as the SDK builds it."""
    async with httpx.AsyncClient(
        transport=async_http_transport(LIMITS, httpx.create_ssl_context()), timeout=SAFETY_TIMEOUT
    ) as http:
        yield http


def _pool_of(http: httpx.AsyncClient) -> httpcore.AsyncConnectionPool:
    transport = http._transport
    if isinstance(transport, AsyncHTTPTransport):
        return transport.pool
    assert isinstance(transport, httpx.AsyncHTTPTransport)
    assert isinstance(transport._pool, httpcore.AsyncConnectionPool)
    return transport._pool


def _backend_of(http: httpx.AsyncClient) -> object:
    """The network backend under the SDK's deadline wrapper (or httpx's own)."""
    backend = _pool_of(http)._network_backend
    return getattr(backend, "backend", backend)


def _stream_of(response: httpx.Response) -> object:
    stream = response.extensions["network_stream"]
    return getattr(stream, "inner", stream)


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A port bound to nobody listening; kept bound so no other process can take it."""
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        yield unused.getsockname()[1]


# The SDK wiring


async def test_sdk_async_client_sends_through_the_asyncio_backend(server: _LocalServer) -> None:
    """An httpx upgrade that stores its pool elsewhere would silently drop the backend
    (``async_http_transport`` only logs at debug level); this makes that loud."""
    async with AsyncClient(api_key=API_KEY, base_url=BASE_URL) as sdk:
        plain, streaming = sdk._transport._http, sdk._transport._stream_http
        assert plain is not streaming
        for http in (plain, streaming):
            assert isinstance(_backend_of(http), AsyncioBackend)
        # The rebuilt pools keep the limits the SDK chose for each client.
        assert _pool_of(plain)._max_connections == MAX_CONCURRENT_ASYNC_REQUESTS
        assert _pool_of(streaming)._max_connections == STREAM_CONNECTION_LIMITS.max_connections
        assert _pool_of(streaming)._max_keepalive_connections == 0

        response = await plain.get(server.url("/ok"))
        assert isinstance(_stream_of(response), AsyncioStream)
        async with streaming.stream("GET", server.url("/ok")) as streamed:
            assert isinstance(_stream_of(streamed), AsyncioStream)
            assert await streamed.aread() == b"ok"


async def test_sdk_async_client_leaves_a_given_http_client_untouched() -> None:
    """A caller's client keeps the transport and backend the caller chose."""
    given = httpx.AsyncClient()
    transport_before = given._transport
    pool_before = _pool_of(given)
    async with AsyncClient(api_key=API_KEY, base_url=BASE_URL, http_client=given) as sdk:
        assert sdk._transport._http is given
        assert sdk._transport._stream_http is given
    assert given._transport is transport_before
    assert _pool_of(given) is pool_before
    assert not isinstance(pool_before._network_backend, AsyncioBackend)
    assert not given.is_closed
    await given.aclose()


@pytest.mark.parametrize("variable", ["HTTPS_PROXY", "http_proxy", "ALL_PROXY"])
async def test_sdk_async_client_keeps_httpx_transports_when_a_proxy_is_configured(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    """httpx routes through environment proxies only with transports it builds itself,
    so the backend must step aside rather than bypass a configured proxy."""
    monkeypatch.setenv(variable, "http://proxy.invalid:3128")

    async with AsyncClient(api_key=API_KEY, base_url=BASE_URL) as sdk:
        for http in (sdk._transport._http, sdk._transport._stream_http):
            assert not isinstance(_backend_of(http), AsyncioBackend)
            assert any(mount is not None for mount in http._mounts.values())


# Plain HTTP exchanges


async def test_json_body_is_posted_and_echoed_back(
    client: httpx.AsyncClient, server: _LocalServer
) -> None:
    """The write path and a Content-Length read, the SDK's everyday request."""
    payload = {"agent": "ag_1", "input": ["héllo", 1, None, {"nested": True}]}

    response = await client.post(server.url("/echo"), json=payload)

    assert response.status_code == 200
    assert response.json() == payload
    assert json.loads(response.request.content) == payload


async def test_large_upload_is_echoed_intact(
    client: httpx.AsyncClient, server: _LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A body larger than the socket buffers makes asyncio pause writing; the request
    must wait for resume_writing and still deliver every byte. The server reads nothing
    until the client has paused, so the buffers fill however large the kernel makes them."""
    paused = asyncio.Event()
    original = _Connection.pause_writing

    def pause_writing_noted(connection: _Connection) -> None:
        original(connection)
        paused.set()

    monkeypatch.setattr(_Connection, "pause_writing", pause_writing_noted)

    upload = asyncio.ensure_future(client.post(server.url("/echo-when-released"), content=BIG_BODY))
    await asyncio.wait_for(paused.wait(), SAFETY_TIMEOUT)
    server.release.set()
    response = await upload

    assert response.content == BIG_BODY


async def test_large_streamed_download_survives_paused_reading(
    client: httpx.AsyncClient, server: _LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader that falls behind makes the connection stop reading at the high-water
    mark; it must resume as the buffer drains, without losing or reordering bytes."""
    paused = asyncio.Event()
    original = _Connection.data_received

    def data_received_noting_pauses(connection: _Connection, data: bytes) -> None:
        original(connection, data)
        if connection.reading_paused:
            paused.set()

    monkeypatch.setattr(_Connection, "data_received", data_received_noting_pauses)

    assert len(BIG_BODY) > 4 * _HIGH_WATER
    received = bytearray()
    async with client.stream("GET", server.url("/big")) as response:
        chunks = response.aiter_bytes()
        received += await anext(chunks)
        # Stop consuming until the socket has delivered past the high-water mark.
        await asyncio.wait_for(paused.wait(), SAFETY_TIMEOUT)
        async for chunk in chunks:
            received += chunk

    assert len(received) == len(BIG_BODY)
    assert received == BIG_BODY


async def test_chunked_streamed_response_is_reassembled(
    client: httpx.AsyncClient, server: _LocalServer
) -> None:
    """Chunked framing arrives split across reads at arbitrary points."""
    async with client.stream("GET", server.url("/chunked")) as response:
        assert response.headers["transfer-encoding"] == "chunked"
        body = b"".join([chunk async for chunk in response.aiter_bytes()])

    assert body == CHUNKED_BODY


# Failures


async def test_silent_server_raises_read_timeout_on_time(
    client: httpx.AsyncClient, server: _LocalServer
) -> None:
    """The read timer must fire: a server that takes the request and never answers."""
    started = time.perf_counter()
    with pytest.raises(httpx.ReadTimeout):
        await client.get(server.url("/hang"), timeout=0.3)
    elapsed = time.perf_counter() - started

    assert 0.25 <= elapsed < 1.5


async def test_refused_connection_raises_connect_error(
    client: httpx.AsyncClient, refused_port: int
) -> None:
    """An OSError from connecting must surface as httpx's ConnectError, not raw OSError."""
    with pytest.raises(httpx.ConnectError):
        await client.get(f"http://127.0.0.1:{refused_port}/")


async def _get_after_each_server_close(
    server: _LocalServer, count: int, get: Callable[[str], Awaitable[bytes]]
) -> None:
    """``count`` sequential requests, each answered and then closed by the server."""
    for _ in range(count):
        assert await get(server.url("/ok-then-close")) == b"ok"
        # The server has closed the socket: the pooled connection is dead while idle.
        assert await asyncio.to_thread(server.closed_connections.acquire, timeout=SAFETY_TIMEOUT)


def _content_getter(http: httpx.AsyncClient) -> Callable[[str], Awaitable[bytes]]:
    async def get(url: str) -> bytes:
        return (await http.get(url)).content

    return get


async def test_connections_closed_by_the_server_while_idle_are_replaced(
    client: httpx.AsyncClient, server: _LocalServer
) -> None:
    """httpcore reuses a pooled connection unless ``is_readable`` reports the server's
    close; the backend answers that from the EOF its protocol has seen."""
    await _get_after_each_server_close(server, 20, _content_getter(client))

    assert server.connections_opened == 20


def _never_readable(connection: _Connection) -> bool:
    return False


async def test_negative_control_blind_is_readable_reuses_dead_connections(
    client: httpx.AsyncClient, server: _LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Shows the test above depends on ``is_readable``: when it never reports the
    server's close, the pool sends the second request down the dead connection."""
    monkeypatch.setattr(_Connection, "readable", property(_never_readable))

    with pytest.raises(httpx.RemoteProtocolError, match="Server disconnected"):
        await _get_after_each_server_close(server, 2, _content_getter(client))


async def test_request_cancelled_mid_body_frees_its_connection(server: _LocalServer) -> None:
    """Cancellation (``wait_for``, task groups) must close the half-read connection and
    give its slot back; with one connection allowed, a leak makes the next request time
    out waiting for the pool."""
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    timeout = httpx.Timeout(SAFETY_TIMEOUT, pool=1.0)
    async with httpx.AsyncClient(
        transport=async_http_transport(limits, httpx.create_ssl_context()), timeout=timeout
    ) as http:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(http.get(server.url("/stall")), 0.3)
        assert server.stalled.is_set(), "cancelled before the body started; not mid-read"

        response = await http.get(server.url("/ok"))

        assert response.content == b"ok"
        assert len(_pool_of(http).connections) == 1


# TLS


@pytest.fixture
async def trusting_pool(
    certificate: tuple[Path, Path],
) -> AsyncIterator[httpcore.AsyncConnectionPool]:
    """The backend under httpcore's pool, trusting the test certificate.
    ``async_http_transport`` always verifies against the default CAs."""
    trusting = ssl.create_default_context(cafile=certificate[0])
    async with httpcore.AsyncConnectionPool(
        ssl_context=trusting, network_backend=AsyncioBackend()
    ) as pool:
        yield pool


async def test_tls_with_the_certificate_trusted_works_plain_and_streamed(
    trusting_pool: httpcore.AsyncConnectionPool, tls_server: _LocalServer
) -> None:
    """start_tls must hand the connection to asyncio's SSL transport, including the
    pause/resume of reading that a large streamed body needs."""
    response = await trusting_pool.request("GET", tls_server.url("/ok"))
    assert response.content == b"ok"
    stream = _stream_of(response)
    assert isinstance(stream, AsyncioStream)
    assert isinstance(stream.get_extra_info("ssl_object"), ssl.SSLObject)
    assert stream.get_extra_info("server_addr") == ("127.0.0.1", tls_server.port)

    received = bytearray()
    async with trusting_pool.stream("GET", tls_server.url("/big")) as streamed:
        async for chunk in streamed.aiter_stream():
            received += chunk
    assert received == BIG_BODY


async def test_tls_connections_closed_by_the_server_while_idle_are_replaced(
    trusting_pool: httpcore.AsyncConnectionPool, tls_server: _LocalServer
) -> None:
    """The SDK talks https: the server's close must also reach ``is_readable`` through
    asyncio's SSL protocol, which sits between the socket and the connection."""

    async def get(url: str) -> bytes:
        return (await trusting_pool.request("GET", url)).content

    await _get_after_each_server_close(tls_server, 20, get)

    assert tls_server.connections_opened == 20


async def test_tls_with_default_cas_rejects_a_self_signed_certificate(
    client: httpx.AsyncClient, tls_server: _LocalServer
) -> None:
    """The module's transport verifies certificates; a failed handshake is ConnectError."""
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        await client.get(tls_server.url("/ok"))


# Stream details and concurrency


async def test_stream_extra_info_names_its_addresses_and_socket(server: _LocalServer) -> None:
    """httpx exposes these through ``response.extensions["network_stream"]``."""
    stream = await AsyncioBackend().connect_tcp("127.0.0.1", server.port, timeout=SAFETY_TIMEOUT)
    try:
        assert stream.get_extra_info("server_addr") == ("127.0.0.1", server.port)
        client_addr = stream.get_extra_info("client_addr")
        assert client_addr[0] == "127.0.0.1"
        sock = stream.get_extra_info("socket")
        assert sock.getpeername() == ("127.0.0.1", server.port)
        assert sock.getsockname() == client_addr
        assert stream.get_extra_info("ssl_object") is None
        assert stream.get_extra_info("is_readable") is False
        assert stream.get_extra_info("no_such_info") is None
    finally:
        await stream.aclose()


async def test_closing_drops_the_socket_even_with_unsent_data() -> None:
    """A peer that stops reading leaves a request body stuck in the write buffer; a
    polite close alone would keep the socket (and the body) until the peer reads."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        stream = await AsyncioBackend().connect_tcp("127.0.0.1", port, timeout=SAFETY_TIMEOUT)
        peer, _ = listener.accept()  # accepted, and never read from
        with peer:
            with pytest.raises(httpcore.WriteTimeout):
                await stream.write(BIG_BODY * 4, timeout=0.2)
            sock = stream.get_extra_info("socket")

            await stream.aclose()
            for _ in range(3):  # asyncio closes the socket on a later turn of the loop
                await asyncio.sleep(0)

            assert sock.fileno() == -1


async def test_many_concurrent_requests_share_a_limited_pool(server: _LocalServer) -> None:
    """100 requests through 16 connections: waiting for, and reusing, connections."""
    limits = httpx.Limits(max_connections=16, max_keepalive_connections=16)
    # The last of 100 queued requests waits for all before it; only a stuck pool is slow.
    timeout = httpx.Timeout(SAFETY_TIMEOUT, pool=30.0)
    async with httpx.AsyncClient(
        transport=async_http_transport(limits, httpx.create_ssl_context()), timeout=timeout
    ) as http:
        responses = await asyncio.gather(*(http.get(server.url("/ok")) for _ in range(100)))

    assert [response.content for response in responses] == [b"ok"] * 100
    assert 1 <= server.connections_opened <= 16


class _FakeTransport:
    aborted = False

    def abort(self) -> None:
        self.aborted = True


async def test_a_cancellation_that_lands_as_a_connection_opens_is_not_lost() -> None:
    """Python 3.11's ``wait_for`` returned the connection and dropped a cancel that
    arrived as it opened: the cancelled task went on to read a stream forever (a
    runner's serve never returned). The cancel must propagate and the connection close."""
    loop = asyncio.get_running_loop()
    opened: asyncio.Future[tuple[Any, _Connection]] = loop.create_future()

    async def opening() -> tuple[Any, _Connection]:
        return await opened

    connecting = asyncio.ensure_future(_connect(opening, 5.0, None))
    for _ in range(3):  # until it waits on the connection
        await asyncio.sleep(0)
    transport = _FakeTransport()
    opened.set_result((transport, _Connection()))
    connecting.cancel()  # in the same turn of the loop as the connection opens
    with pytest.raises(asyncio.CancelledError):
        await connecting
    await asyncio.sleep(0)
    assert transport.aborted
