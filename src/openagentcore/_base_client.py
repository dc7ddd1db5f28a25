"""Transport: one place that builds requests, sends them with retries and decodes answers.

``_ClientCore`` holds every decision (headers, idempotency keys, URL, how to read an
answer); ``SyncTransport`` and ``AsyncTransport`` only do the I/O. Request headers are
never logged and the API key lives in a private attribute that no repr shows.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx
import pydantic
import tenacity

from ._errors import (
    APIResponseValidationError,
    OpenAgentCoreError,
    _transport_error,
    status_error,
)
from ._network import new_async_http_client
from ._retry import RetryPolicy

__all__ = [
    "API_KEY_ENV",
    "BASE_URL_ENV",
    "DEFAULT_TIMEOUT",
    "AsyncTransport",
    "RequestOptions",
    "SyncTransport",
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

logger = logging.getLogger("openagentcore")


@dataclass(frozen=True, slots=True)
class RequestOptions:
    """One logical API call; retries reuse it unchanged, idempotency key included."""

    method: str
    path: str
    params: Mapping[str, Any] | None = None
    body: Any = None
    has_body: bool = False
    idempotency_key: str | None = None
    stream: bool = False
    headers: Mapping[str, str] = field(default_factory=dict)


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


class _ClientCore:
    """Configuration and the pure parts of a request's life."""

    def __init__(
        self,
        *,
        api_key: str | None,
        base_url: str | httpx.URL | None,
        timeout: float | httpx.Timeout | None,
        max_retries: int,
        default_headers: Mapping[str, str] | None,
    ) -> None:
        api_key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
        if not api_key:
            raise OpenAgentCoreError(
                f"No API key: pass api_key= or set {API_KEY_ENV}. "
                "For the local emulator use the key `openagentcore dev` prints."
            )
        base_url = base_url if base_url is not None else os.environ.get(BASE_URL_ENV)
        if not base_url:
            raise OpenAgentCoreError(
                f"No base URL: pass base_url= or set {BASE_URL_ENV} to the API root "
                "including /v1, e.g. the URL `openagentcore dev` prints."
            )
        self.__api_key = api_key
        url = httpx.URL(str(base_url))
        if not url.raw_path.endswith(b"/"):
            url = url.copy_with(raw_path=url.raw_path + b"/")
        self.base_url = url
        # Joining parses and validates the whole URL; a runner posts to the same few
        # paths over and over, so the joined URLs are remembered.
        self._url: Callable[[str], httpx.URL] = functools.lru_cache(maxsize=_URL_CACHE_SIZE)(
            self._join
        )
        if timeout is None:
            self.timeout = DEFAULT_TIMEOUT
        elif isinstance(timeout, httpx.Timeout):
            self.timeout = timeout
        else:
            self.timeout = httpx.Timeout(timeout, connect=min(timeout, 5.0))
        self.retry_policy = RetryPolicy(max_retries=max_retries)
        self._default_headers = dict(default_headers or {})

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_url={str(self.base_url)!r})"

    def _headers(self, options: RequestOptions, idempotency_key: str | None) -> dict[str, str]:
        from . import __version__

        headers = {
            "Authorization": f"Bearer {self.__api_key}",
            _BETA_HEADER[0]: _BETA_HEADER[1],
            "Accept": "text/event-stream" if options.stream else "application/json",
            "User-Agent": f"openagentcore-python/{__version__}",
            **self._default_headers,
            **options.headers,
        }
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        return headers

    def _idempotency_key(self, options: RequestOptions) -> str | None:
        if options.idempotency_key is not None:
            return check_idempotency_key(options.idempotency_key)
        # A POST without a key could run twice on a retry; with one, the server
        # recognises the repeat. One key per logical call, reused on every retry.
        return new_idempotency_key() if options.method == "POST" else None

    def _join(self, path: str) -> httpx.URL:
        return self.base_url.join(path.lstrip("/"))

    def _build_kwargs(self, options: RequestOptions) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "method": options.method,
            "url": self._url(options.path),
            "params": _clean_params(options.params),
            "headers": self._headers(options, self._idempotency_key(options)),
        }
        if options.has_body:
            kwargs["json"] = options.body
        if options.stream:
            kwargs["timeout"] = httpx.Timeout(
                self.timeout.connect,
                read=STREAM_READ_TIMEOUT,
                write=self.timeout.write,
                connect=self.timeout.connect,
                pool=self.timeout.pool,
            )
        return kwargs

    @staticmethod
    def _error_body(response: httpx.Response) -> object:
        try:
            return response.json()
        except ValueError:
            return response.text

    @staticmethod
    def _decode(response: httpx.Response, parse: Callable[[Any], T] | None) -> T | None:
        if parse is None:
            return None
        if not response.content:
            raise APIResponseValidationError(
                f"Expected a JSON body from {response.request.method} "
                f"{response.request.url.path}, got an empty {response.status_code} response",
                response=response,
                body=None,
            )
        try:
            body = response.json()
        except ValueError as exc:
            raise APIResponseValidationError(
                f"Expected JSON from {response.request.method} {response.request.url.path}, "
                f"got {response.headers.get('content-type', 'no content type')}",
                response=response,
                body=response.text,
            ) from exc
        try:
            return parse(body)
        except pydantic.ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "<root>"
            raise APIResponseValidationError(
                f"Unexpected response shape from {response.request.method} "
                f"{response.request.url.path}: {where}: {first['msg']}",
                response=response,
                body=body,
            ) from exc
        except (TypeError, ValueError) as exc:
            raise APIResponseValidationError(
                f"Unexpected response shape from {response.request.method} "
                f"{response.request.url.path}: {exc}",
                response=response,
                body=body,
            ) from exc

    @staticmethod
    def _log(response: httpx.Response) -> None:
        logger.debug(
            "%s %s -> %s (request id %s)",
            response.request.method,
            response.request.url.path,
            response.status_code,
            response.headers.get("x-request-id"),
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
    ) -> None:
        super().__init__(
            api_key=api_key,
            base_url=base_url,
            timeout=timeout,
            max_retries=max_retries,
            default_headers=default_headers,
        )
        self._owns_http = http_client is None
        self._http = http_client or httpx.Client(timeout=self.timeout)
        self._stream_http = http_client or httpx.Client(
            timeout=self.timeout, limits=STREAM_CONNECTION_LIMITS
        )

    def request(self, options: RequestOptions, parse: Callable[[Any], T] | None) -> T | None:
        response = self.send(options)
        try:
            response.read()
            return self._decode(response, parse)
        finally:
            response.close()

    def send(self, options: RequestOptions) -> httpx.Response:
        """Send with retries; returns a successful response (streaming if asked)."""
        request = self._http.build_request(**self._build_kwargs(options))
        for attempt in tenacity.Retrying(**self.retry_policy.tenacity_kwargs(request)):
            with attempt:
                return self._send_once(request, stream=options.stream)
        raise AssertionError("tenacity returned without an outcome")  # pragma: no cover

    def _send_once(self, request: httpx.Request, *, stream: bool) -> httpx.Response:
        try:
            http = self._stream_http if stream else self._http
            response = http.send(request, stream=stream)
        except httpx.TransportError as exc:
            raise _transport_error(exc, request) from exc
        self._log(response)
        if response.status_code >= 400:
            try:
                response.read()
            finally:
                response.close()
            raise status_error(response, self._error_body(response))
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
    ) -> None:
        super().__init__(
            api_key=api_key,
            base_url=base_url,
            timeout=timeout,
            max_retries=max_retries,
            default_headers=default_headers,
        )
        self._owns_http = http_client is None
        self._request_slots: contextlib.AbstractAsyncContextManager[Any]
        if http_client is not None:
            # A client passed in serves requests and streams alike, with its own limits.
            self._http = self._stream_http = http_client
            self._request_slots = contextlib.nullcontext()
            return
        ssl_context = httpx.create_ssl_context()  # the CA bundle, loaded once for both
        self._http = new_async_http_client(
            timeout=self.timeout,
            limits=httpx.Limits(
                max_connections=MAX_CONCURRENT_ASYNC_REQUESTS,
                max_keepalive_connections=MAX_CONCURRENT_ASYNC_REQUESTS,
            ),
            ssl_context=ssl_context,
        )
        self._stream_http = new_async_http_client(
            timeout=self.timeout, limits=STREAM_CONNECTION_LIMITS, ssl_context=ssl_context
        )
        self._request_slots = asyncio.Semaphore(MAX_CONCURRENT_ASYNC_REQUESTS)

    async def request(self, options: RequestOptions, parse: Callable[[Any], T] | None) -> T | None:
        response = await self.send(options)
        try:
            await response.aread()
            return self._decode(response, parse)
        finally:
            await response.aclose()

    async def send(self, options: RequestOptions) -> httpx.Response:
        """Send with retries; returns a successful response (streaming if asked)."""
        request = self._http.build_request(**self._build_kwargs(options))
        async for attempt in tenacity.AsyncRetrying(**self.retry_policy.tenacity_kwargs(request)):
            with attempt:
                return await self._send_once(request, stream=options.stream)
        raise AssertionError("tenacity returned without an outcome")  # pragma: no cover

    async def _send_once(self, request: httpx.Request, *, stream: bool) -> httpx.Response:
        try:
            if stream:
                response = await self._stream_http.send(request, stream=True)
            else:
                # The body is read before send returns, so the slot covers the connection.
                async with self._request_slots:
                    response = await self._http.send(request)
        except httpx.TransportError as exc:
            raise _transport_error(exc, request) from exc
        self._log(response)
        if response.status_code >= 400:
            try:
                await response.aread()
            finally:
                await response.aclose()
            raise status_error(response, self._error_body(response))
        return response

    async def close(self) -> None:
        if self._owns_http:
            await self._http.aclose()
            await self._stream_http.aclose()


def dump_json(value: Any) -> Any:
    """Turn pydantic models (wire models keep field presence) and containers into JSON."""
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
