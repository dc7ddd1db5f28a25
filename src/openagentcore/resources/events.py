"""``client.sessions.events``: send input, and open the live event stream."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from typing_extensions import Unpack

from .._base_client import RequestOptions
from .._streaming import AsyncEventStream, EventStream
from ..types import InputEvent
from ._base import AsyncResource, CallOptions, SyncResource, dump_json, path

__all__ = ["MAX_EVENTS_PER_BATCH", "AsyncEvents", "Events", "InputEvent"]

_ROUTE = "agents/sessions/{session_id}/events"
MAX_EVENTS_PER_BATCH = 64


def _create(
    session_id: str,
    events: Iterable[InputEvent | Mapping[str, Any]],
    idempotency_key: str | None,
) -> RequestOptions:
    batch = [dump_json(event) for event in events]
    if len(batch) > MAX_EVENTS_PER_BATCH:
        raise ValueError(
            f"events holds {len(batch)} events; a batch takes at most "
            f"{MAX_EVENTS_PER_BATCH}. Split it into several calls."
        )
    return RequestOptions(
        "POST",
        path(_ROUTE, session_id=session_id),
        body={"events": batch},
        has_body=True,
        idempotency_key=idempotency_key,
        keyed=True,
    )


def _stream(session_id: str) -> RequestOptions:
    return RequestOptions("GET", path(_ROUTE, session_id=session_id), stream=True)


class Events(SyncResource):
    """``client.sessions.events``: submit input events and open the live stream."""

    def create(
        self,
        session_id: str,
        *,
        events: Iterable[InputEvent | Mapping[str, Any]],
        idempotency_key: str | None = None,
        **call: Unpack[CallOptions],
    ) -> None:
        """Submit 1 to 64 input events as one atomic batch.

        202 means the batch was stored, not that the agent used it. Pass your own
        ``idempotency_key`` to make a retry after a crash the same request; otherwise
        one is made for this call and reused on automatic retries.
        """
        self._call_no_body(_create(session_id, events, idempotency_key), call)

    def stream(self, session_id: str, **call: Unpack[CallOptions]) -> EventStream:
        """Open the live stream. It starts now: nothing earlier is replayed."""
        return EventStream(self._send(_stream(session_id), call))


class AsyncEvents(AsyncResource):
    """The async twin of :class:`Events`."""

    async def create(
        self,
        session_id: str,
        *,
        events: Iterable[InputEvent | Mapping[str, Any]],
        idempotency_key: str | None = None,
        **call: Unpack[CallOptions],
    ) -> None:
        """Submit 1 to 64 input events as one atomic batch (see :meth:`Events.create`)."""
        await self._call_no_body(_create(session_id, events, idempotency_key), call)

    async def stream(self, session_id: str, **call: Unpack[CallOptions]) -> AsyncEventStream:
        """Open the live stream. It starts now: nothing earlier is replayed."""
        return AsyncEventStream(await self._send(_stream(session_id), call))
