"""Typed Session event streams on top of httpx-sse.

An ``error`` frame with code ``stream_interrupted`` means the server dropped this reader
(it fell behind, or the connection is being closed): it is raised as
:class:`~openagentcore.StreamError` and the stream closes. Other ``error`` events belong
to the Session's history (e.g. an Environment that failed to provision) and are yielded
like any other event.
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from types import TracebackType
from typing import Any

import httpx
import httpx_sse
from typing_extensions import Self

from ._errors import APIError, APIResponseValidationError, StreamError, _transport_error
from .types import Session, SessionCreatedEvent, SessionEvent, parse_event

__all__ = ["AsyncCreationEventStream", "AsyncEventStream", "CreationEventStream", "EventStream"]

_INTERRUPTED = "stream_interrupted"


def _decode(sse: httpx_sse.ServerSentEvent, response: httpx.Response) -> SessionEvent:
    try:
        data: Any = json.loads(sse.data)
    except ValueError as exc:
        raise APIResponseValidationError(
            f"Event stream frame {sse.event!r} is not JSON", response=response, body=sse.data
        ) from exc
    if not isinstance(data, dict):
        raise APIResponseValidationError(
            f"Event stream frame {sse.event!r} is not a JSON object", response=response, body=data
        )
    if sse.event == "error" or data.get("type") == "error":
        raw_error = data.get("error")
        error: dict[str, Any] = raw_error if isinstance(raw_error, dict) else {}
        if error.get("code") == _INTERRUPTED:
            raise StreamError(
                str(error.get("message") or "The event stream was interrupted."),
                code=_INTERRUPTED,
                type=error.get("type") if isinstance(error.get("type"), str) else None,
                request=response.request,
            )
    return parse_event(data)


def _not_a_stream(response: httpx.Response) -> APIResponseValidationError:
    """A 2xx answer that is not an event stream (httpx-sse reports it as a transport
    error, which would wrongly blame the network)."""
    request = response.request
    content_type = response.headers.get("content-type", "no content type")
    return APIResponseValidationError(
        f"Expected an event stream from {request.method} {request.url.path}, got "
        f"{content_type}; check that base_url points at the Agents API",
        response=response,
        body=None,
    )


def _shutdown_socket(response: httpx.Response) -> None:
    """Wake a thread blocked reading this response: closing alone does not interrupt a
    read in progress on another thread, shutting the socket down does."""
    stream = response.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if isinstance(sock, socket.socket):
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


class EventStream:
    """A live iterator of :data:`~openagentcore.types.SessionEvent`; close it when done.

    Usable as a context manager. Iteration ends when the server closes the stream; a
    dropped connection raises :class:`~openagentcore.APIConnectionError`.
    """

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._events = httpx_sse.EventSource(response).iter_sse()
        self._closed = False

    def __iter__(self) -> Iterator[SessionEvent]:
        return self

    def __next__(self) -> SessionEvent:
        if self._closed:
            raise StopIteration
        try:
            sse = next(self._events)
        except StopIteration:
            self.close()
            raise
        except httpx_sse.SSEError as exc:
            self.close()
            raise _not_a_stream(self.response) from exc
        except httpx.TransportError as exc:
            self.close()
            raise _transport_error(exc, self.response.request) from exc
        try:
            return _decode(sse, self.response)
        except StreamError:
            self.close()
            raise

    def close(self) -> None:
        """Close the stream; safe to call from another thread to stop a blocked reader."""
        self._closed = True
        _shutdown_socket(self.response)
        self.response.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncEventStream:
    """The async twin of :class:`EventStream`."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._events = httpx_sse.EventSource(response).aiter_sse()
        self._closed = False

    def __aiter__(self) -> AsyncIterator[SessionEvent]:
        return self

    async def __anext__(self) -> SessionEvent:
        if self._closed:
            raise StopAsyncIteration
        try:
            sse = await self._events.__anext__()
        except StopAsyncIteration:
            await self.close()
            raise
        except httpx_sse.SSEError as exc:
            await self.close()
            raise _not_a_stream(self.response) from exc
        except httpx.TransportError as exc:
            await self.close()
            raise _transport_error(exc, self.response.request) from exc
        try:
            return _decode(sse, self.response)
        except StreamError:
            await self.close()
            raise

    async def close(self) -> None:
        """Close the stream and its connection."""
        self._closed = True
        await self.response.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


def _sent_key(response: httpx.Response) -> str | None:
    key: str | None = response.request.headers.get("Idempotency-Key")
    return key


class CreationEventStream(EventStream):
    """The event stream of a streamed Session creation.

    :attr:`session` is the created Session, taken from ``agent.session.created``. When
    the stream ends or breaks before that event arrives (a retried creation streams
    nothing, and a dropped connection can lose it), the stream repeats the creation
    with the same ``Idempotency-Key`` and ``stream: false``, which returns the
    committed Session without admitting anything again (sessions-events.md). Later
    work is not followed: observe it with ``client.sessions.events.stream``.
    """

    def __init__(self, response: httpx.Response, recover: Callable[[str], Session]) -> None:
        super().__init__(response)
        self.session: Session | None = None
        self._recover = recover

    def __next__(self) -> SessionEvent:
        closed_by_caller = self._closed
        try:
            event = super().__next__()
        except (StopIteration, APIError):
            if not closed_by_caller:
                self._recover_session()
            raise
        if self.session is None and isinstance(event, SessionCreatedEvent):
            self.session = event.session
        return event

    def _recover_session(self) -> None:
        key = _sent_key(self.response)
        if self.session is None and key is not None:
            self.session = self._recover(key)


class AsyncCreationEventStream(AsyncEventStream):
    """The async twin of :class:`CreationEventStream`."""

    def __init__(
        self, response: httpx.Response, recover: Callable[[str], Awaitable[Session]]
    ) -> None:
        super().__init__(response)
        self.session: Session | None = None
        self._recover = recover

    async def __anext__(self) -> SessionEvent:
        closed_by_caller = self._closed
        try:
            event = await super().__anext__()
        except (StopAsyncIteration, APIError):
            if not closed_by_caller:
                await self._recover_session()
            raise
        if self.session is None and isinstance(event, SessionCreatedEvent):
            self.session = event.session
        return event

    async def _recover_session(self) -> None:
        key = _sent_key(self.response)
        if self.session is None and key is not None:
            self.session = await self._recover(key)
