"""Transport: one place that builds requests, sends them with retries and decodes answers.

``_ClientCore`` holds every decision (headers, idempotency keys, URL, how to read an
answer); ``SyncTransport`` and ``AsyncTransport`` only do the I/O. Request headers are
never logged and the API key lives in a private attribute that no repr shows.

When the SDK built its HTTP clients itself, a request goes straight to their transport:
``httpx.Client.build_request`` and ``send`` would merge a base URL, parameters and
headers that never change, run an auth flow and event hooks that are empty, and read
every response for cookies, which cost nearly as much CPU as the HTTP protocol. What
``send`` does that matters is done here (cookies kept when a server sets them, the
response's ``elapsed``, httpx's log line, refusing a closed client). A client passed in
as ``http_client`` always goes through ``send``, with whatever it was configured with;
its attempts (and those through a proxy) are bounded from outside, since the
per-request deadline reaches only the SDK's own transports.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import copy
import dataclasses
import functools
import logging
import os
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx
import pydantic

from ._errors import (
    APIError,
    APIResponseValidationError,
    APIStatusError,
    APITimeoutError,
    NotFoundError,
    OpenAgentCoreError,
    ResponseTooLargeError,
    _transport_error,
    status_error,
)
from ._limits import ResponseLimits, load_json
from ._network import (
    AsyncHTTPTransport,
    SyncHTTPTransport,
    deadline,
    new_async_http_client,
    new_sync_http_client,
)
from ._retry import Attempts, RetryPolicy

__all__ = [
    "API_KEY_ENV",
    "BASE_URL_ENV",
    "DEFAULT_TIMEOUT",
    "STREAM_SETTINGS",
    "AsyncTransport",
    "RequestOptions",
    "StreamSettings",
    "SyncTransport",
    "capture_responses",
]

T = TypeVar("T")

API_KEY_ENV = "OPENAGENTCORE_API_KEY"
BASE_URL_ENV = "OPENAGENTCORE_BASE_URL"
DEFAULT_TIMEOUT = httpx.Timeout(60.0, connect=5.0)
#: Read timeout of an open event stream. The server sends a keepalive every 15 s, so
#: three missed keepalives mean the connection is dead, not quiet.
STREAM_READ_TIMEOUT = 45.0
#: Every Session a runner serves holds one connection open for its event stream, so
#: streams get a pool of their own: httpx's defaults (100 connections, 20 kept alive)
#: would stall a runner past 100 Sessions, and requests sharing a pool with hundreds of
#: streams pay for a scan of every connection on each request.
STREAM_CONNECTION_LIMITS = httpx.Limits(max_connections=10_000, max_keepalive_connections=0)
#: Requests one AsyncClient sends at once; more wait for a slot. httpcore examines every
#: pooled connection on each request (a system call each with asyncio) and scans its
#: whole queue whenever a connection frees up, so letting hundreds of Sessions post at
#: once costs more CPU than queueing them: at 200 Sessions this limit raised a runner's
#: calls per second by about 30%.
MAX_CONCURRENT_ASYNC_REQUESTS = 16
_URL_CACHE_SIZE = 1024
MAX_IDEMPOTENCY_KEY_BYTES = 128
_BETA_HEADER = ("OpenAI-Beta", "agents=v1")
#: Key under which a streaming response's ``extensions`` carry its :class:`StreamSettings`.
STREAM_SETTINGS = "openagentcore.stream_settings"

logger = logging.getLogger("openagentcore")
#: httpx's logger: requests sent past ``httpx.Client.send`` are logged there all the same.
_httpx_logger = logging.getLogger("httpx")


@dataclass(frozen=True, slots=True)
class RequestOptions:
    """One logical API call; retries reuse it unchanged, idempotency key included.

    ``keyed`` marks the two routes whose ``Idempotency-Key`` the contract honours
    (Session creation and event submission): only they get an automatic key, and only
    they are POSTs that may be retried after the server could have admitted them.
    The ``extra_*``, ``timeout`` and ``max_retries`` fields are the caller's
    per-request options.
    """

    method: str
    path: str
    params: Mapping[str, Any] | None = None
    body: Any = None
    has_body: bool = False
    idempotency_key: str | None = None
    stream: bool = False
    headers: Mapping[str, str] = field(default_factory=dict)
    keyed: bool = False
    timeout: float | httpx.Timeout | None = None
    max_retries: int | None = None
    extra_headers: Mapping[str, str] | None = None
    extra_query: Mapping[str, Any] | None = None
    extra_body: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class StreamSettings:
    """What an event stream needs from its client: limits and the idle bound."""

    limits: ResponseLimits
    #: Seconds within which each event (or keepalive) must arrive complete.
    idle_timeout: float


#: Where :func:`capture_responses` collects the successful responses of this context.
_captured: contextvars.ContextVar[list[httpx.Response] | None] = contextvars.ContextVar(
    "openagentcore_captured", default=None
)


@contextlib.contextmanager
def capture_responses() -> Iterator[list[httpx.Response]]:
    """Collect every successful HTTP response sent in this context (``with_raw_response``)."""
    responses: list[httpx.Response] = []
    token = _captured.set(responses)
    try:
        yield responses
    finally:
        _captured.reset(token)


def new_idempotency_key() -> str:
    return f"oac-{uuid.uuid4().hex}"


def check_idempotency_key(key: str) -> str:
    """Refuse, before anything is sent, a key the server or HTTP itself would reject."""
    size = len(key.encode("utf-8"))
    if not key.strip() or size > MAX_IDEMPOTENCY_KEY_BYTES:
        raise ValueError(
            f"idempotency_key must be 1 to {MAX_IDEMPOTENCY_KEY_BYTES} bytes and not only "
            f"whitespace, got {size} bytes; use a shorter key (for example a hash of your "
            "own id)"
        )
    if not (key.isascii() and key.isprintable()):
        raise ValueError(
            "idempotency_key must be printable ASCII because it travels as an HTTP header; "
            "encode your id first (for example as hex or a hash)"
        )
    return key


#: Either kind of HTTP client: the parts of a request's life that touch one only read it.
_HTTPClient = httpx.Client | httpx.AsyncClient


class _ClientCore:
    """Configuration and the pure parts of a request's life."""

    #: Whether ``close`` closes the HTTP clients: not when they were passed in, nor in
    #: a ``with_options`` copy, which shares its original's.
    _owns_http: bool

    def __init__(
        self,
        *,
        api_key: str | None,
        base_url: str | httpx.URL | None,
        timeout: float | httpx.Timeout | None,
        max_retries: int,
        default_headers: Mapping[str, str] | None,
        retry_policy: RetryPolicy | None = None,
        response_limits: ResponseLimits | None = None,
    ) -> None:
        api_key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
        if not api_key:
            raise OpenAgentCoreError(
                f"No API key: pass api_key= or set {API_KEY_ENV}. "
                "For the local emulator use the key `openagentcore dev` prints."
            )
        _check_api_key(api_key)
        base_url = base_url if base_url is not None else os.environ.get(BASE_URL_ENV)
        if not base_url:
            raise OpenAgentCoreError(
                f"No base URL: pass base_url= or set {BASE_URL_ENV} to the API root "
                "including /v1, e.g. the URL `openagentcore dev` prints."
            )
        self.__api_key = api_key
        url = _checked_base_url(str(base_url))
        if not url.raw_path.endswith(b"/"):
            url = url.copy_with(raw_path=url.raw_path + b"/")
        self.base_url = url
        # Joining parses and validates the whole URL; a runner posts to the same few
        # paths over and over, so the joined URLs are remembered.
        self._url: Callable[[str], httpx.URL] = functools.lru_cache(maxsize=_URL_CACHE_SIZE)(
            self._join
        )
        self.timeout = _as_timeout(timeout)
        self.retry_policy = retry_policy or RetryPolicy(max_retries=max_retries)
        self.response_limits = response_limits or ResponseLimits()
        self._default_headers = dict(default_headers or {})
        #: ``_fixed_headers`` merged over the HTTP client's, by ``stream``.
        self._merged_fixed: dict[bool, httpx.Headers] = {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_url={str(self.display_url)!r})"

    def settings(self) -> dict[str, Any]:
        """What a transport of the other kind (sync or async) needs to reach the same
        server the same way: key, URL, timeouts, retries, headers and limits."""
        return {
            "api_key": self.__api_key,
            "base_url": self.base_url,
            "timeout": self.timeout,
            "max_retries": self.retry_policy.max_retries,
            "retry_policy": self.retry_policy,
            "default_headers": dict(self._default_headers),
            "response_limits": self.response_limits,
        }

    @property
    def display_url(self) -> httpx.URL:
        """The base URL as safe to show: without user info (it may hold a password)."""
        return self.base_url.copy_with(userinfo=b"")

    def _configured_copy(
        self,
        *,
        timeout: float | httpx.Timeout | None,
        max_retries: int | None,
        retry_policy: RetryPolicy | None,
        default_headers: Mapping[str, str] | None,
        response_limits: ResponseLimits | None,
    ) -> Any:
        """A shallow copy sharing the HTTP connections, with other settings replaced.

        The copy never closes the connections: they belong to the original.
        """
        clone = copy.copy(self)
        clone._owns_http = False
        clone._merged_fixed = {}
        if timeout is not None:
            clone.timeout = _as_timeout(timeout)
        if retry_policy is not None:
            clone.retry_policy = retry_policy
        if max_retries is not None:
            clone.retry_policy = dataclasses.replace(clone.retry_policy, max_retries=max_retries)
        if default_headers is not None:
            clone._default_headers = {**self._default_headers, **default_headers}
        if response_limits is not None:
            clone.response_limits = response_limits
        return clone

    def _headers(self, options: RequestOptions, idempotency_key: str | None) -> dict[str, str]:
        headers = {
            **self._fixed_headers(options.stream),
            **options.headers,
            **(options.extra_headers or {}),
        }
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        return headers

    def _fixed_headers(self, stream: bool) -> dict[str, str]:
        """The headers every request of this client (or every stream) sends."""
        from . import __version__

        return {
            "Authorization": f"Bearer {self.__api_key}",
            _BETA_HEADER[0]: _BETA_HEADER[1],
            "Accept": "text/event-stream" if stream else "application/json",
            "User-Agent": f"openagentcore-python/{__version__}",
            **self._default_headers,
        }

    def _merged_headers(
        self, options: RequestOptions, idempotency_key: str | None, http: _HTTPClient
    ) -> httpx.Headers:
        """What ``http.build_request`` makes of :meth:`_headers`: ``http``'s headers
        updated with them. Without per-call headers the merge is done once per client."""
        merged = self._merged_fixed.get(options.stream)
        if merged is None:
            merged = httpx.Headers(http.headers)
            merged.update(self._fixed_headers(options.stream))
            self._merged_fixed[options.stream] = merged
        if (
            options.headers
            or options.extra_headers
            or (idempotency_key is not None and "idempotency-key" in merged)
        ):
            headers = httpx.Headers(http.headers)
            headers.update(self._headers(options, idempotency_key))
            return headers
        headers = httpx.Headers(merged)
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        return headers

    def _idempotency_key(self, options: RequestOptions) -> str | None:
        if options.idempotency_key is not None:
            return check_idempotency_key(options.idempotency_key)
        # On the routes that honour it, a key lets the server recognise a retried POST.
        # One key per logical call, reused on every retry. Other routes ignore the
        # header, so sending one there would only pretend to protect a retry.
        return new_idempotency_key() if options.keyed and options.method == "POST" else None

    def _join(self, path: str) -> httpx.URL:
        return self.base_url.join(path.lstrip("/"))

    def _timeout(self, options: RequestOptions) -> httpx.Timeout:
        timeout = self.timeout if options.timeout is None else _as_timeout(options.timeout)
        if options.stream:
            return httpx.Timeout(
                timeout.connect,
                read=STREAM_READ_TIMEOUT,
                write=timeout.write,
                connect=timeout.connect,
                pool=timeout.pool,
            )
        return timeout

    def _deadline(self, options: RequestOptions) -> float | None:
        """Seconds one attempt may take from connecting to its last body byte (for a
        stream: to its headers): the largest of the configured timeouts."""
        timeout = self.timeout if options.timeout is None else _as_timeout(options.timeout)
        bounds = [t for t in (timeout.connect, timeout.read, timeout.write) if t is not None]
        return max(bounds) if bounds else None

    def _policy(self, options: RequestOptions) -> RetryPolicy:
        if options.max_retries is None:
            return self.retry_policy
        return dataclasses.replace(self.retry_policy, max_retries=options.max_retries)

    def _new_request(
        self, options: RequestOptions, http: _HTTPClient, *, direct: bool
    ) -> httpx.Request:
        """The request for ``options``, as ``http.build_request`` builds it. For the
        SDK's own clients (``direct``) it is built without ``build_request``, whose
        merging of the client's URL, headers, cookies and parameters would redo work
        whose result never changes: those clients have no base URL, no parameters and
        fixed headers, so only their cookies are merged (when they hold any)."""
        params = _clean_params(options.params)
        if options.extra_query:
            params = {**(params or {}), **options.extra_query}
        url = self._url(options.path)
        key = self._idempotency_key(options)
        timeout = self._timeout(options)
        payload = self._payload(options)
        if not direct:
            headers = self._headers(options, key)
            return http.build_request(
                options.method, url, params=params, headers=headers, timeout=timeout, json=payload
            )
        return httpx.Request(
            options.method,
            url,
            params=params,
            headers=self._merged_headers(options, key, http),
            cookies=http.cookies,
            json=payload,
            extensions={"timeout": timeout.as_dict()},
        )

    def _payload(self, options: RequestOptions) -> Any:
        """The JSON body, or ``None`` for none."""
        if not (options.has_body or options.extra_body):
            return None
        payload = options.body if options.has_body else {}
        if options.extra_body:
            if not isinstance(payload, Mapping):
                raise TypeError("extra_body needs a request whose body is a JSON object")
            payload = {**payload, **dump_json(options.extra_body)}
        return payload

    def _attempts(self, options: RequestOptions, request: httpx.Request) -> Attempts:
        replayable = options.method != "POST" or options.keyed
        return Attempts(self._policy(options), request, replayable=replayable)

    def _direct_eligible(self) -> bool:
        """Whether requests may skip ``httpx.Client.send`` when the SDK built the HTTP
        clients: not with user info in the base URL, for which httpx sends Basic auth."""
        return not self.base_url.userinfo

    @staticmethod
    def _received(http: _HTTPClient, response: httpx.Response) -> None:
        """What ``httpx.Client.send`` does with a response that the SDK's transport
        returned directly: keep its cookies (when it sets any) and log it on httpx's
        logger. (A 3xx gets no ``next_request``: it is an error, never followed.)"""
        if "set-cookie" in response.headers:
            http.cookies.extract_cookies(response)
        if _httpx_logger.isEnabledFor(logging.INFO):
            request = response.request
            _httpx_logger.info(
                'HTTP Request: %s %s "%s %d %s"',
                request.method,
                request.url,
                response.http_version,
                response.status_code,
                response.reason_phrase,
            )

    @staticmethod
    def _check_open(http: _HTTPClient) -> None:
        """Refuse to send on a closed client, as ``httpx.Client.send`` does."""
        if http.is_closed:
            raise RuntimeError("Cannot send a request, as the client has been closed.")

    def _too_large(self, response: httpx.Response) -> ResponseTooLargeError:
        limit = self.response_limits.max_body_bytes
        return ResponseTooLargeError(
            f"The response to {response.request.method} {response.request.url.path} is larger "
            f"than {limit} bytes (ResponseLimits.max_body_bytes); it was not read",
            response=response,
            body=None,
        )

    def _status_error(self, response: httpx.Response, data: bytes) -> APIStatusError:
        buffered = _buffered(response, data)
        error = status_error(buffered, self._error_body(data))
        if isinstance(error, NotFoundError) and error.route_missing:
            error.message = self._wrong_base_url(error)
        return error

    def _wrong_base_url(self, error: NotFoundError) -> str:
        """What a 404 naming no API route means: ``base_url`` does not point at the API
        root. Names the URL requested (no user info, no query) and the likely fix."""
        url = error.response.request.url
        requested = str(url.copy_with(userinfo=b"", query=None))
        why = (
            f": the API has no such route ({error.message})"
            if error.from_api
            else " without the API's error body, so something other than the API answered"
        )
        fix = "base_url must be the API root, ending in /v1"
        if not self.base_url.path.rstrip("/").endswith("/v1"):
            fix += f": did you mean {str(self.display_url.join('v1'))!r}?"
        else:
            fix += " (the URL `openagentcore dev` or your server's documentation gives)"
        return (
            f"base_url {str(self.display_url)!r} looks wrong: {error.response.request.method} "
            f"{requested} answered 404{why}; {fix}"
        )

    def _error_body(self, data: bytes) -> object:
        try:
            return load_json(data, self.response_limits.max_json_depth)
        except ValueError:
            return data.decode("utf-8", errors="replace")

    def _decode(self, response: httpx.Response, data: bytes, parse: Callable[[Any], T]) -> T:
        request = response.request
        where = f"{request.method} {request.url.path}"
        if not data:
            raise APIResponseValidationError(
                f"Expected a JSON body from {where}, got an empty {response.status_code} response",
                response=response,
                body=None,
            )
        try:
            body = load_json(data, self.response_limits.max_json_depth)
        except ValueError as exc:
            content_type = response.headers.get("content-type", "no content type")
            raise APIResponseValidationError(
                f"Expected JSON from {where}, got {content_type}: {exc}",
                response=_buffered(response, data),
                body=data.decode("utf-8", errors="replace"),
            ) from exc
        try:
            return parse(body)
        except pydantic.ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(part) for part in first["loc"]) or "<root>"
            raise APIResponseValidationError(
                f"Unexpected response shape from {where}: {loc}: {first['msg']}",
                response=_buffered(response, data),
                body=body,
            ) from exc
        except (TypeError, ValueError, RecursionError) as exc:
            raise APIResponseValidationError(
                f"Unexpected response shape from {where}: {exc}",
                response=_buffered(response, data),
                body=body,
            ) from exc

    def _stream_settings(self) -> StreamSettings:
        return StreamSettings(self.response_limits, STREAM_READ_TIMEOUT)

    @staticmethod
    def _log(response: httpx.Response) -> None:
        if not logger.isEnabledFor(logging.DEBUG):
            return
        logger.debug(
            "%s %s -> %s (request id %s)",
            response.request.method,
            response.request.url.path,
            response.status_code,
            response.headers.get("x-request-id"),
        )

    @staticmethod
    def _captured(response: httpx.Response) -> None:
        responses = _captured.get()
        if responses is not None:
            responses.append(response)


def _check_api_key(api_key: str) -> None:
    """Refuse a key that cannot travel in a header, without ever echoing it."""
    if api_key != api_key.strip() or not (api_key.isascii() and api_key.isprintable()):
        raise OpenAgentCoreError(
            "The API key has surrounding whitespace, a line break, a control character or "
            "non-ASCII text, so it cannot be sent in an HTTP header. Check where it comes "
            "from (a trailing newline in a file, a pasted quote) and pass the bare key."
        )
    if " " in api_key:
        raise OpenAgentCoreError("The API key contains a space; pass the bare key.")


def _checked_base_url(base_url: str) -> httpx.URL:
    """``base_url`` parsed, or an error saying what to change. Paths are appended to
    it, so a query or fragment would be dropped from every request (and a token in it
    shown by ``repr``); the message never repeats them."""
    where = f"base_url (or {BASE_URL_ENV})"
    if "://" not in base_url:
        raise OpenAgentCoreError(
            f"{where} has no scheme; start it with http:// or https://, e.g. "
            "'http://127.0.0.1:8765/v1' (the URL `openagentcore dev` prints)"
        )
    url = httpx.URL(base_url)
    if url.scheme not in ("http", "https"):
        raise OpenAgentCoreError(
            f"{where} must be an http:// or https:// URL, not {url.scheme}://; "
            "use the API root, e.g. 'https://api.example.com/v1'"
        )
    if not url.host:
        raise OpenAgentCoreError(f"{where} has no host; use e.g. 'https://api.example.com/v1'")
    root = str(url.copy_with(userinfo=b"", query=None, fragment=None)).split("?")[0]
    if url.query or b"?" in url.raw_path:
        raise OpenAgentCoreError(
            f"{where} has a query string (its value is not shown): requests append their "
            f"paths to base_url, so the query would be dropped. Pass the API root alone, "
            f"{root!r}, and the key as api_key (or {API_KEY_ENV})"
        )
    if url.fragment or "#" in base_url:
        raise OpenAgentCoreError(
            f"{where} has a #fragment, which is never sent; pass the API root alone, {root!r}"
        )
    return url


def _as_timeout(timeout: float | httpx.Timeout | None) -> httpx.Timeout:
    if timeout is None:
        return DEFAULT_TIMEOUT
    if isinstance(timeout, httpx.Timeout):
        return timeout
    return httpx.Timeout(timeout, connect=min(timeout, 5.0))


def _buffered(response: httpx.Response, data: bytes) -> httpx.Response:
    """A read copy of a streamed ``response`` whose body is ``data`` (already decoded),
    so errors can offer ``.text`` and ``.json()``."""
    headers = [
        (name, value)
        for name, value in response.headers.multi_items()
        if name.lower() not in ("content-encoding", "content-length", "transfer-encoding")
    ]
    return httpx.Response(
        response.status_code,
        headers=headers,
        content=data,
        request=response.request,
        extensions=response.extensions,
    )


def _clean_params(params: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not params:
        return None
    return {key: value for key, value in params.items() if value is not None}


class SyncTransport(_ClientCore):
    """Blocking I/O on top of :class:`_ClientCore`."""

    def __init__(
        self,
        *,
        api_key: str | None,
        base_url: str | httpx.URL | None,
        timeout: float | httpx.Timeout | None,
        max_retries: int,
        default_headers: Mapping[str, str] | None,
        http_client: httpx.Client | None,
        retry_policy: RetryPolicy | None = None,
        response_limits: ResponseLimits | None = None,
    ) -> None:
        super().__init__(
            api_key=api_key,
            base_url=base_url,
            timeout=timeout,
            max_retries=max_retries,
            default_headers=default_headers,
            retry_policy=retry_policy,
            response_limits=response_limits,
        )
        self._owns_http = http_client is None
        #: An ``http_client`` passed in: its transport and settings are the caller's.
        self.given_http = http_client is not None
        #: The SDK's own transports, which requests go to directly (None: through
        #: ``httpx.Client.send``, as for a client passed in).
        self._direct: SyncHTTPTransport | None = None
        self._stream_direct: SyncHTTPTransport | None = None
        if http_client is not None:
            self._http = self._stream_http = http_client
            return
        ssl_context = httpx.create_ssl_context()
        self._http, direct = new_sync_http_client(
            timeout=self.timeout, limits=httpx.Limits(), ssl_context=ssl_context
        )
        self._stream_http, stream_direct = new_sync_http_client(
            timeout=self.timeout, limits=STREAM_CONNECTION_LIMITS, ssl_context=ssl_context
        )
        if self._direct_eligible():
            self._direct, self._stream_direct = direct, stream_direct

    def with_options(self, **changes: Any) -> SyncTransport:
        clone: SyncTransport = self._configured_copy(**changes)
        return clone

    def request(self, options: RequestOptions, parse: Callable[[Any], T] | None) -> T | None:
        """Send with retries and read the whole answer within one deadline per attempt."""
        request = self._new_request(options, self._http, direct=self._direct is not None)
        seconds = self._deadline(options)

        def attempt() -> tuple[httpx.Response, bytes]:
            with deadline(seconds):
                response = self._send_once(request, stream=False)
                try:
                    return response, self._read(response)
                finally:
                    response.close()

        if self._direct is None:
            attempt = _on_worker(attempt, seconds, request)
        response, data = self._retried(options, request, attempt)
        return None if parse is None else self._decode(response, data, parse)

    def send(self, options: RequestOptions) -> httpx.Response:
        """Send with retries; returns a successful streaming response."""
        request = self._new_request(options, self._http, direct=self._stream_direct is not None)
        seconds = self._deadline(options)

        def attempt() -> httpx.Response:
            with deadline(seconds):
                return self._send_once(request, stream=True)

        if self._stream_direct is None:
            attempt = _on_worker(attempt, seconds, request, abandon=httpx.Response.close)
        response = self._retried(options, request, attempt)
        response.extensions = {**response.extensions, STREAM_SETTINGS: self._stream_settings()}
        return response

    def _retried(
        self, options: RequestOptions, request: httpx.Request, attempt: Callable[[], T]
    ) -> T:
        attempts = self._attempts(options, request)
        while True:
            try:
                return attempt()
            except APIError as error:
                time.sleep(attempts.wait_after(error))

    def _read(self, response: httpx.Response) -> bytes:
        limit = self.response_limits.max_body_bytes
        data = bytearray()
        try:
            for chunk in response.iter_bytes():
                data += chunk
                if len(data) > limit:
                    raise self._too_large(response)
        except httpx.TransportError as exc:
            raise _transport_error(exc, response.request) from exc
        return bytes(data)

    def _send_once(self, request: httpx.Request, *, stream: bool) -> httpx.Response:
        http = self._stream_http if stream else self._http
        direct = self._stream_direct if stream else self._direct
        try:
            if direct is None:
                response = http.send(request, stream=True, follow_redirects=False)
            else:
                self._check_open(http)
                response = direct.handle_request(request)
                self._received(http, response)
        except httpx.TransportError as exc:
            raise _transport_error(exc, request) from exc
        self._log(response)
        if not 200 <= response.status_code < 300:
            try:
                data = self._read(response)
            except APIError:
                data = b""
            finally:
                response.close()
            raise self._status_error(response, data)
        self._captured(response)
        return response

    def close(self) -> None:
        if self._owns_http:
            self._http.close()
            self._stream_http.close()


class AsyncTransport(_ClientCore):
    """Asynchronous I/O on top of :class:`_ClientCore`."""

    def __init__(
        self,
        *,
        api_key: str | None,
        base_url: str | httpx.URL | None,
        timeout: float | httpx.Timeout | None,
        max_retries: int,
        default_headers: Mapping[str, str] | None,
        http_client: httpx.AsyncClient | None,
        retry_policy: RetryPolicy | None = None,
        response_limits: ResponseLimits | None = None,
        native_asyncio: bool = True,
    ) -> None:
        super().__init__(
            api_key=api_key,
            base_url=base_url,
            timeout=timeout,
            max_retries=max_retries,
            default_headers=default_headers,
            retry_policy=retry_policy,
            response_limits=response_limits,
        )
        self._owns_http = http_client is None
        self._request_slots: asyncio.Semaphore | None = None
        #: As in :class:`SyncTransport`.
        self._direct: AsyncHTTPTransport | None = None
        self._stream_direct: AsyncHTTPTransport | None = None
        if http_client is not None:
            # A client passed in serves requests and streams alike, with its own limits.
            self._http = self._stream_http = http_client
            return
        ssl_context = httpx.create_ssl_context()  # the CA bundle, loaded once for both
        self._http, direct = new_async_http_client(
            timeout=self.timeout,
            limits=httpx.Limits(
                max_connections=MAX_CONCURRENT_ASYNC_REQUESTS,
                max_keepalive_connections=MAX_CONCURRENT_ASYNC_REQUESTS,
            ),
            ssl_context=ssl_context,
            native_asyncio=native_asyncio,
        )
        self._stream_http, stream_direct = new_async_http_client(
            timeout=self.timeout,
            limits=STREAM_CONNECTION_LIMITS,
            ssl_context=ssl_context,
            native_asyncio=native_asyncio,
        )
        if self._direct_eligible():
            self._direct, self._stream_direct = direct, stream_direct
        self._request_slots = asyncio.Semaphore(MAX_CONCURRENT_ASYNC_REQUESTS)

    def with_options(self, **changes: Any) -> AsyncTransport:
        clone: AsyncTransport = self._configured_copy(**changes)
        return clone

    def _slot(self) -> contextlib.AbstractAsyncContextManager[Any]:
        """A request slot on asyncio; under another loop (trio) the pool's limit does."""
        if self._request_slots is None:
            return contextlib.nullcontext()
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return contextlib.nullcontext()
        return self._request_slots

    async def request(self, options: RequestOptions, parse: Callable[[Any], T] | None) -> T | None:
        """Send with retries and read the whole answer within one deadline per attempt."""
        request = self._new_request(options, self._http, direct=self._direct is not None)
        seconds = self._deadline(options)

        async def attempt() -> tuple[httpx.Response, bytes]:
            # The slot covers the connection until the body is read; the deadline
            # starts once a slot is free, so queueing behind others does not count.
            async with self._slot():
                with deadline(seconds):
                    response = await self._send_once(request, stream=False)
                    try:
                        return response, await self._read(response)
                    finally:
                        await response.aclose()

        if self._direct is None:
            attempt = _cancelled_after(attempt, seconds, request)
        response, data = await self._retried(options, request, attempt)
        return None if parse is None else self._decode(response, data, parse)

    async def send(self, options: RequestOptions) -> httpx.Response:
        """Send with retries; returns a successful streaming response."""
        request = self._new_request(options, self._http, direct=self._stream_direct is not None)
        seconds = self._deadline(options)

        async def attempt() -> httpx.Response:
            with deadline(seconds):
                return await self._send_once(request, stream=True)

        if self._stream_direct is None:
            attempt = _cancelled_after(attempt, seconds, request)
        response = await self._retried(options, request, attempt)
        response.extensions = {**response.extensions, STREAM_SETTINGS: self._stream_settings()}
        return response

    async def _retried(
        self, options: RequestOptions, request: httpx.Request, attempt: Callable[[], Awaitable[T]]
    ) -> T:
        attempts = self._attempts(options, request)
        while True:
            try:
                return await attempt()
            except APIError as error:
                await _sleep(attempts.wait_after(error))

    async def _read(self, response: httpx.Response) -> bytes:
        limit = self.response_limits.max_body_bytes
        data = bytearray()
        try:
            async for chunk in response.aiter_bytes():
                data += chunk
                if len(data) > limit:
                    raise self._too_large(response)
        except httpx.TransportError as exc:
            raise _transport_error(exc, response.request) from exc
        return bytes(data)

    async def _send_once(self, request: httpx.Request, *, stream: bool) -> httpx.Response:
        http = self._stream_http if stream else self._http
        direct = self._stream_direct if stream else self._direct
        try:
            if direct is None:
                response = await http.send(request, stream=True, follow_redirects=False)
            else:
                self._check_open(http)
                response = await direct.handle_async_request(request)
                self._received(http, response)
        except httpx.TransportError as exc:
            raise _transport_error(exc, request) from exc
        self._log(response)
        if not 200 <= response.status_code < 300:
            try:
                data = await self._read(response)
            except APIError:
                data = b""
            finally:
                await response.aclose()
            raise self._status_error(response, data)
        self._captured(response)
        return response

    async def close(self) -> None:
        if self._owns_http:
            await self._http.aclose()
            await self._stream_http.aclose()


# The deadline of a transport that is not the SDK's own: an ``http_client`` passed in,
# or httpx's transports when a proxy is configured. :func:`deadline` reaches only the
# SDK's transports, so there the whole attempt is bounded from outside.


def _on_worker(
    attempt: Callable[[], T],
    seconds: float | None,
    request: httpx.Request,
    *,
    abandon: Callable[[T], object] | None = None,
) -> Callable[[], T]:
    """``attempt`` run on a thread of its own, which the caller stops waiting for after
    ``seconds``: a blocking transport cannot be interrupted, so the caller gets its
    ``APITimeoutError`` on time and the abandoned exchange ends on that thread (bounded
    by the per-operation timeouts); ``abandon`` releases what it returns late."""
    if seconds is None:
        return attempt

    def bounded() -> T:
        outcome: list[Any] = []
        finished = threading.Event()
        lock = threading.Lock()
        context = contextvars.copy_context()

        def work() -> None:
            try:
                result: Any = (context.run(attempt), None)
            except BaseException as exc:  # handed to the caller, who re-raises it
                result = (None, exc)
            with lock:
                if not finished.is_set():
                    outcome.append(result)
                    finished.set()
                    return
            if abandon is not None and result[1] is None:
                abandon(result[0])

        threading.Thread(target=work, name="openagentcore-request", daemon=True).start()
        finished.wait(seconds)
        with lock:
            if not outcome:
                finished.set()  # too late: the worker releases what it gets
                raise APITimeoutError(request=request)
        value, error = outcome[0]
        if error is not None:
            raise error
        return value  # type: ignore[no-any-return]

    return bounded


def _cancelled_after(
    attempt: Callable[[], Coroutine[Any, Any, T]], seconds: float | None, request: httpx.Request
) -> Callable[[], Coroutine[Any, Any, T]]:
    """``attempt`` cancelled after ``seconds`` (on asyncio or trio), raising
    ``APITimeoutError``."""
    if seconds is None:
        return attempt

    async def bounded() -> T:
        import anyio

        with anyio.move_on_after(seconds):
            return await attempt()
        raise APITimeoutError(request=request)

    return bounded


async def _sleep(seconds: float) -> None:
    """Wait between attempts: with asyncio's sleep on asyncio (looked up when called,
    as tenacity did), else with anyio's, which serves trio, the other loop httpx runs on."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        import anyio

        await anyio.sleep(seconds)
        return
    await asyncio.sleep(seconds)


#: Types ``dump_json`` returns as they are, checked first: most of a body is made of them.
_JSON_SCALARS = frozenset({str, int, float, bool, type(None)})


def dump_json(value: Any) -> Any:
    """Turn pydantic models (wire models keep field presence) and containers into JSON."""
    kind = type(value)
    if kind in _JSON_SCALARS:
        return value
    if kind is dict:
        return {str(k): dump_json(v) for k, v in value.items()}
    from .types import WireModel

    if isinstance(value, WireModel):
        return value.to_wire()
    if isinstance(value, pydantic.BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    if isinstance(value, Mapping):
        return {str(k): dump_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [dump_json(v) for v in value]
    return value
