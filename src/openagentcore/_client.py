"""``Client`` and ``AsyncClient``: the entry points."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Generic, TypeVar

import httpx

from ._base_client import AsyncTransport, SyncTransport, capture_responses
from ._errors import OpenAgentCoreError
from ._limits import ResponseLimits
from ._retry import RetryPolicy
from .resources import Agents, AsyncAgents, AsyncSessions, Sessions

__all__ = ["AsyncClient", "Client", "RawResponse"]

DEFAULT_MAX_RETRIES = 2

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RawResponse(Generic[T]):
    """A call's parsed result together with the HTTP response that carried it.

    ``response`` is the last successful response of the call (a list call that walked
    several pages reports the last page's); its body has already been consumed.
    """

    parsed: T
    response: httpx.Response

    @property
    def headers(self) -> httpx.Headers:
        """The response's HTTP headers."""
        return self.response.headers

    @property
    def status_code(self) -> int:
        """The HTTP status, always a 2xx here."""
        return self.response.status_code

    @property
    def request_id(self) -> str | None:
        """The server's ``x-request-id``, to quote in a bug report."""
        value = self.response.headers.get("x-request-id")
        return value if isinstance(value, str) else None


def _raw(parsed: T, responses: list[httpx.Response]) -> RawResponse[T]:
    if not responses:
        raise OpenAgentCoreError(
            "with_raw_response: the function made no request through this client; pass a "
            "function that calls it, e.g. `lambda c: c.sessions.retrieve(session_id)`"
        )
    return RawResponse(parsed, responses[-1])


class Client:
    """Blocking client for the Agents API.

    ``api_key`` falls back to ``OPENAGENTCORE_API_KEY`` and ``base_url`` (the API root,
    including ``/v1``) to ``OPENAGENTCORE_BASE_URL``. ``timeout`` bounds each network
    operation, and the largest of its values bounds each whole attempt (connect, send,
    headers and body), so a server trickling bytes cannot hold a call forever, also
    through a proxy or an ``http_client`` of your own (whose attempt then runs on a
    thread of its own that the call stops waiting for at the deadline). Failed
    requests are retried ``max_retries`` times when that is safe, or as
    ``retry_policy`` says (see :class:`~openagentcore.RetryPolicy`);
    ``response_limits`` bounds what a server's answer may cost (see
    :class:`~openagentcore.ResponseLimits`). Close it, or use it as a context manager.
    """

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | httpx.URL | None = None,
        timeout: float | httpx.Timeout | None = None,
        max_retries: int = DEFAULT_MAX_RETRIES,
        default_headers: Mapping[str, str] | None = None,
        http_client: httpx.Client | None = None,
        retry_policy: RetryPolicy | None = None,
        response_limits: ResponseLimits | None = None,
    ) -> None:
        self._bind(
            SyncTransport(
                api_key=api_key,
                base_url=base_url,
                timeout=timeout,
                max_retries=max_retries,
                default_headers=default_headers,
                http_client=http_client,
                retry_policy=retry_policy,
                response_limits=response_limits,
            )
        )

    def _bind(self, transport: SyncTransport) -> None:
        self._transport = transport
        self.agents = Agents(transport)
        self.sessions = Sessions(transport)

    @property
    def base_url(self) -> httpx.URL:
        """The API root requests go to, with ``/v1`` and a trailing slash."""
        return self._transport.base_url

    def with_options(
        self,
        *,
        timeout: float | httpx.Timeout | None = None,
        max_retries: int | None = None,
        retry_policy: RetryPolicy | None = None,
        default_headers: Mapping[str, str] | None = None,
        response_limits: ResponseLimits | None = None,
    ) -> Client:
        """A copy with some settings replaced, sharing this client's connections.

        Closing the copy does nothing; close the original when done with both.
        ``default_headers`` are added to the current ones.
        """
        clone = object.__new__(Client)
        clone._bind(
            self._transport.with_options(
                timeout=timeout,
                max_retries=max_retries,
                retry_policy=retry_policy,
                default_headers=default_headers,
                response_limits=response_limits,
            )
        )
        return clone

    def _async_twin(self) -> AsyncClient:
        """An :class:`AsyncClient` reaching the same server with the same settings, for
        work the SDK runs on an event loop of its own (``FunctionRunner.serve_agent``)."""
        if self._transport.given_http:
            raise OpenAgentCoreError(
                "This Client was built on an httpx.Client of yours, and this needs an "
                "asyncio client with the same transport: use AsyncFunctionRunner with an "
                "AsyncClient(http_client=httpx.AsyncClient(...)) configured the same way"
            )
        return AsyncClient(**self._transport.settings())

    def with_raw_response(self, call: Callable[[Client], T]) -> RawResponse[T]:
        """Run ``call`` with this client and return its result with the HTTP response,
        for headers and the request id: ``client.with_raw_response(lambda c:
        c.sessions.retrieve(session_id)).request_id``."""
        with capture_responses() as responses:
            parsed = call(self)
        return _raw(parsed, responses)

    def close(self) -> None:
        """Close the connections this client opened (never an ``http_client`` you passed)."""
        self._transport.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client(base_url={str(self._transport.display_url)!r})"


class AsyncClient:
    """The asyncio twin of :class:`Client`; every request method is a coroutine.

    Without ``http_client`` it opens its connections on plain asyncio, which costs far
    less CPU per request than httpx's default backend (unless ``HTTP(S)_PROXY`` is set:
    then httpx's own transports route through the proxy). Under another event loop
    (trio) or with ``native_asyncio=False`` it uses httpcore's anyio backend, as httpx
    does. Pass an ``httpx.AsyncClient`` to choose the transport, TLS settings and
    limits yourself.
    """

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | httpx.URL | None = None,
        timeout: float | httpx.Timeout | None = None,
        max_retries: int = DEFAULT_MAX_RETRIES,
        default_headers: Mapping[str, str] | None = None,
        http_client: httpx.AsyncClient | None = None,
        retry_policy: RetryPolicy | None = None,
        response_limits: ResponseLimits | None = None,
        native_asyncio: bool = True,
    ) -> None:
        self._bind(
            AsyncTransport(
                api_key=api_key,
                base_url=base_url,
                timeout=timeout,
                max_retries=max_retries,
                default_headers=default_headers,
                http_client=http_client,
                retry_policy=retry_policy,
                response_limits=response_limits,
                native_asyncio=native_asyncio,
            )
        )

    def _bind(self, transport: AsyncTransport) -> None:
        self._transport = transport
        self.agents = AsyncAgents(transport)
        self.sessions = AsyncSessions(transport)

    @property
    def base_url(self) -> httpx.URL:
        """The API root requests go to, with ``/v1`` and a trailing slash."""
        return self._transport.base_url

    def with_options(
        self,
        *,
        timeout: float | httpx.Timeout | None = None,
        max_retries: int | None = None,
        retry_policy: RetryPolicy | None = None,
        default_headers: Mapping[str, str] | None = None,
        response_limits: ResponseLimits | None = None,
    ) -> AsyncClient:
        """A copy with some settings replaced, sharing this client's connections
        (see :meth:`Client.with_options`)."""
        clone = object.__new__(AsyncClient)
        clone._bind(
            self._transport.with_options(
                timeout=timeout,
                max_retries=max_retries,
                retry_policy=retry_policy,
                default_headers=default_headers,
                response_limits=response_limits,
            )
        )
        return clone

    async def with_raw_response(
        self, call: Callable[[AsyncClient], Awaitable[T]]
    ) -> RawResponse[T]:
        """Await ``call`` with this client and return its result with the HTTP response
        (see :meth:`Client.with_raw_response`)."""
        with capture_responses() as responses:
            parsed = await call(self)
        return _raw(parsed, responses)

    async def close(self) -> None:
        """Close the connections this client opened (never an ``http_client`` you passed)."""
        await self._transport.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"AsyncClient(base_url={str(self._transport.display_url)!r})"
