"""``Client`` and ``AsyncClient``: the entry points."""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType

import httpx

from ._base_client import AsyncTransport, SyncTransport
from .resources import Agents, AsyncAgents, AsyncSessions, Sessions

__all__ = ["AsyncClient", "Client"]

DEFAULT_MAX_RETRIES = 2


class Client:
    """Blocking client for the Agents API.

    ``api_key`` falls back to ``OPENAGENTCORE_API_KEY`` and ``base_url`` (the API root,
    including ``/v1``) to ``OPENAGENTCORE_BASE_URL``. Failed requests are retried
    ``max_retries`` times when that is safe (see :class:`~openagentcore.RetryPolicy`).
    Close it, or use it as a context manager.
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
    ) -> None:
        self._transport = SyncTransport(
            api_key=api_key,
            base_url=base_url,
            timeout=timeout,
            max_retries=max_retries,
            default_headers=default_headers,
            http_client=http_client,
        )
        self.agents = Agents(self._transport)
        self.sessions = Sessions(self._transport)

    @property
    def base_url(self) -> httpx.URL:
        """The API root requests go to, with ``/v1`` and a trailing slash."""
        return self._transport.base_url

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
        return f"Client(base_url={str(self.base_url)!r})"


class AsyncClient:
    """The asyncio twin of :class:`Client`; every request method is a coroutine.

    Without ``http_client`` it opens its connections on plain asyncio, which costs far
    less CPU per request than httpx's default backend (unless ``HTTP(S)_PROXY`` is set:
    then httpx's own transports route through the proxy). Pass an ``httpx.AsyncClient``
    to choose the transport, TLS settings and limits yourself.
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
    ) -> None:
        self._transport = AsyncTransport(
            api_key=api_key,
            base_url=base_url,
            timeout=timeout,
            max_retries=max_retries,
            default_headers=default_headers,
            http_client=http_client,
        )
        self.agents = AsyncAgents(self._transport)
        self.sessions = AsyncSessions(self._transport)

    @property
    def base_url(self) -> httpx.URL:
        """The API root requests go to, with ``/v1`` and a trailing slash."""
        return self._transport.base_url

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
        return f"AsyncClient(base_url={str(self.base_url)!r})"
