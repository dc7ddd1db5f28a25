"""Typed Session event streams, framed by a bounded Server-Sent Events reader.

An ``error`` frame with code ``stream_interrupted`` means the server dropped this reader
(it fell behind, or the connection is being closed): it is raised as
:class:`~openagentcore.StreamError` and the stream closes. Other ``error`` events belong
to the Session's history (e.g. an Environment that failed to provision) and are yielded
like any other event.

The framing is done here rather than by httpx-sse because a hostile server must not be
able to grow one line or one event without bound, or to keep a stream alive forever by
trickling bytes that never complete an event: each event must fit
``ResponseLimits.max_event_bytes`` and arrive complete within the idle timeout. An
event that is not JSON, or fails validation, raises
:class:`~openagentcore.APIResponseValidationError` (with the raw event as ``body``) and
closes the stream.
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import httpx
import pydantic
from typing_extensions import Self

from ._base_client import STREAM_READ_TIMEOUT, STREAM_SETTINGS, StreamSettings
from ._errors import (
    APIError,
    APIResponseValidationError,
    APITimeoutError,
    ResponseTooLargeError,
    StreamError,
    _transport_error,
)
from ._limits import ResponseLimits, load_json
from ._network import deadline
from .types import Session, SessionCreatedEvent, SessionEvent, parse_event

__all__ = ["AsyncCreationEventStream", "AsyncEventStream", "CreationEventStream", "EventStream"]

_INTERRUPTED = "stream_interrupted"
_LINE_END = re.compile(rb"\r\n|\r|\n")
_COLON = ord(":")


@dataclass(frozen=True, slots=True)
class _Frame:
    event: str
    data: str


class _SSEParser:
    """Server-Sent Events framing (the WHATWG rules) with a size bound per event.

    ``feed`` returns the events completed by a chunk and whether any frame ended (a
    blank line: an event, or a keepalive comment), which restarts the idle clock.
    Frames with only ``id:``, ``retry:`` or ``event:`` lines carry no data and, as the
    spec says, dispatch nothing.
    """

    def __init__(self, max_event_bytes: int) -> None:
        self._limit = max_event_bytes
        self._buffer = bytearray()
        self._event = ""
        self._data: list[str] = []
        self._size = 0
        self._unscanned = 0

    def feed(self, chunk: bytes) -> tuple[list[_Frame], bool]:
        buffer = self._buffer
        buffer += chunk
        lines, consumed = self._complete_lines()
        del buffer[:consumed]
        # The bytes left hold no line end (bar a trailing CR): a long line arriving in
        # many chunks is scanned once, not once per chunk.
        self._unscanned = max(len(buffer) - 1, 0)
        frames, ended = self._take(lines)
        if self._size + len(buffer) > self._limit:
            raise ValueError(f"an event is larger than {self._limit} bytes")
        return frames, ended

    def _complete_lines(self) -> tuple[list[bytearray], int]:
        """The complete lines in the buffer (without their line ends), and how many of
        its bytes they span."""
        buffer, search_at = self._buffer, self._unscanned
        if buffer.find(b"\r", search_at) < 0:
            # Only LF line ends (what servers send): split at C speed.
            end = buffer.rfind(b"\n", search_at)
            return (buffer[:end].split(b"\n"), end + 1) if end >= 0 else ([], 0)
        lines: list[bytearray] = []
        start = 0
        while True:
            match = _LINE_END.search(buffer, search_at)
            # A lone CR at the end may be the first half of CRLF: wait for more.
            if match is None or (match.group() == b"\r" and match.end() == len(buffer)):
                return lines, start
            lines.append(buffer[start : match.start()])
            start = search_at = match.end()

    def _take(self, lines: list[bytearray]) -> tuple[list[_Frame], bool]:
        """Apply complete lines: fields gather, a blank line ends a frame."""
        frames: list[_Frame] = []
        ended = False
        for line in lines:
            if not line:
                ended = True
                if self._data:
                    frames.append(_Frame(self._event or "message", "\n".join(self._data)))
                self._event, self._data, self._size = "", [], 0
                continue
            self._size += len(line)
            if line[0] == _COLON:  # a comment
                continue
            name, _, value = line.decode("utf-8", errors="replace").partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "data":
                self._data.append(value)
            elif name == "event":
                self._event = value
            # id and retry only matter to a reconnecting EventSource; this stream never
            # replays, so they are accepted and ignored, as are unknown fields.
        return frames, ended


def _settings(response: httpx.Response) -> StreamSettings:
    settings = response.extensions.get(STREAM_SETTINGS)
    if isinstance(settings, StreamSettings):
        return settings
    return StreamSettings(ResponseLimits(), STREAM_READ_TIMEOUT)


def _decode(frame: _Frame, response: httpx.Response, limits: ResponseLimits) -> SessionEvent:
    try:
        data: Any = load_json(frame.data, limits.max_json_depth)
    except ValueError as exc:
        raise APIResponseValidationError(
            f"Event stream frame {frame.event!r} is not JSON: {exc}",
            response=response,
            body=frame.data,
        ) from exc
    if not isinstance(data, dict):
        raise APIResponseValidationError(
            f"Event stream frame {frame.event!r} is not a JSON object",
            response=response,
            body=data,
        )
    if frame.event == "error" or data.get("type") == "error":
        raw_error = data.get("error")
        error: dict[str, Any] = raw_error if isinstance(raw_error, dict) else {}
        if error.get("code") == _INTERRUPTED:
            raise StreamError(
                str(error.get("message") or "The event stream was interrupted."),
                code=_INTERRUPTED,
                type=error.get("type") if isinstance(error.get("type"), str) else None,
                request=response.request,
            )
    try:
        return parse_event(data)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "<root>"
        raise APIResponseValidationError(
            f"Event {data.get('type')!r} does not match the contract: {where}: {first['msg']}",
            response=response,
            body=data,
        ) from exc
    except (TypeError, ValueError, RecursionError) as exc:
        raise APIResponseValidationError(
            f"Event {data.get('type')!r} does not match the contract: {exc}",
            response=response,
            body=data,
        ) from exc


def _not_a_stream(response: httpx.Response) -> APIResponseValidationError:
    """A 2xx answer that is not an event stream."""
    request = response.request
    content_type = response.headers.get("content-type", "no content type")
    return APIResponseValidationError(
        f"Expected an event stream from {request.method} {request.url.path}, got "
        f"{content_type}; check that base_url points at the Agents API",
        response=response,
        body=None,
    )


def _is_event_stream(response: httpx.Response) -> bool:
    return "text/event-stream" in response.headers.get("content-type", "").lower()


def _too_large(response: httpx.Response, exc: ValueError) -> ResponseTooLargeError:
    return ResponseTooLargeError(
        f"Event stream from {response.request.url.path}: {exc} "
        "(ResponseLimits.max_event_bytes); the stream was closed",
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


class _Reader:
    """State shared by both streams: pending events and the idle clock."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.settings = _settings(response)
        self.parser = _SSEParser(self.settings.limits.max_event_bytes)
        self.pending: list[_Frame] = []
        self.frame_deadline = time.monotonic() + self.settings.idle_timeout

    def time_left(self) -> float:
        """Seconds left for the next frame to complete; raises once none are."""
        left = self.frame_deadline - time.monotonic()
        if left <= 0:
            raise APITimeoutError(request=self.response.request)
        return left

    def feed(self, chunk: bytes) -> None:
        try:
            frames, ended = self.parser.feed(chunk)
        except ValueError as exc:
            raise _too_large(self.response, exc) from exc
        self.pending.extend(frames)
        if ended:
            self.frame_deadline = time.monotonic() + self.settings.idle_timeout

    def next_event(self) -> SessionEvent:
        frame = self.pending.pop(0)
        return _decode(frame, self.response, self.settings.limits)


class EventStream:
    """A live iterator of :data:`~openagentcore.types.SessionEvent`; close it when done.

    Usable as a context manager. Iteration ends when the server closes the stream; a
    dropped connection raises :class:`~openagentcore.APIConnectionError`, and an event
    that does not complete within the idle timeout :class:`~openagentcore.APITimeoutError`.
    """

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._reader = _Reader(response)
        self._chunks: Iterator[bytes] | None = None
        self._closed = False
        #: Whether a thread is reading now: a close from another thread then leaves the
        #: socket to it (see :meth:`close`).
        self._reading = False
        #: Reentrant: a signal handler that closes the stream runs on the reading thread,
        #: which may hold the lock at that moment.
        self._lock = threading.RLock()

    def __iter__(self) -> Iterator[SessionEvent]:
        return self

    def __next__(self) -> SessionEvent:
        with self._lock:
            if self._closed:
                raise StopIteration
            self._reading = True
        try:
            return self._next()
        except BaseException as exc:
            with self._lock:
                # Closed by another thread during the read: what woke it is the close.
                stopped = self._closed and isinstance(exc, Exception)
                self._closed = True
            if stopped:
                raise StopIteration from None
            raise
        finally:
            with self._lock:
                self._reading = False
                closed = self._closed
            if closed:
                self.response.close()

    def _next(self) -> SessionEvent:
        reader = self._reader
        if self._chunks is None:
            if not _is_event_stream(self.response):
                raise _not_a_stream(self.response)
            self._chunks = self.response.iter_bytes()
        while not reader.pending:
            try:
                with deadline(reader.time_left()):
                    chunk = next(self._chunks, None)
            except httpx.TransportError as exc:
                raise _transport_error(exc, self.response.request) from exc
            if chunk is None:
                raise StopIteration
            reader.feed(chunk)
        return reader.next_event()

    def close(self) -> None:
        """Close the stream; safe to call from another thread to stop a blocked reader.

        While another thread reads, only the socket is shut down, which wakes it; that
        thread closes the response as it returns. Closing the socket under it instead
        frees its descriptor while the read may still be about to use the number, which
        the next connection opened can get: the read then waits on, or takes the bytes
        of, someone else's connection."""
        with self._lock:
            self._closed = True
            reading = self._reading
        _shutdown_socket(self.response)
        if not reading:
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
        self._reader = _Reader(response)
        self._chunks: AsyncIterator[bytes] | None = None
        self._closed = False

    def __aiter__(self) -> AsyncIterator[SessionEvent]:
        return self

    async def __anext__(self) -> SessionEvent:
        if self._closed:
            raise StopAsyncIteration
        try:
            return await self._next()
        except BaseException:
            await self.close()
            raise

    async def _next(self) -> SessionEvent:
        reader = self._reader
        if self._chunks is None:
            if not _is_event_stream(self.response):
                raise _not_a_stream(self.response)
            self._chunks = self.response.aiter_bytes()
        while not reader.pending:
            try:
                with deadline(reader.time_left()):
                    chunk = await anext(self._chunks, None)
            except httpx.TransportError as exc:
                raise _transport_error(exc, self.response.request) from exc
            if chunk is None:
                raise StopAsyncIteration
            reader.feed(chunk)
        return reader.next_event()

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
