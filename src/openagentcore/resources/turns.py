"""``client.sessions.turns``: the durable record of each Turn."""

from __future__ import annotations

from typing_extensions import Unpack

from .._base_client import RequestOptions
from .._pagination import AsyncPageRequest, Order, SyncPage, list_params
from ..types import Turn
from ._base import AsyncResource, CallOptions, SyncResource, path

__all__ = ["AsyncTurns", "Turns"]

_ROOT = "agents/sessions/{session_id}/turns"
_ONE = "agents/sessions/{session_id}/turns/{turn_id}"


def _retrieve(session_id: str, turn_id: str) -> RequestOptions:
    return RequestOptions("GET", path(_ONE, session_id=session_id, turn_id=turn_id))


class Turns(SyncResource):
    """``client.sessions.turns``: read the record of each Turn."""

    def retrieve(self, turn_id: str, *, session_id: str, **call: Unpack[CallOptions]) -> Turn:
        """Read one Turn of a Session."""
        return self._call(_retrieve(session_id, turn_id), Turn.model_validate, call)

    def list(
        self,
        session_id: str,
        *,
        after: str | None = None,
        limit: int | None = None,
        order: Order | None = None,
        **call: Unpack[CallOptions],
    ) -> SyncPage[Turn]:
        """One page of the Session's Turns; iterating it walks every following page."""
        route = path(_ROOT, session_id=session_id)
        query = list_params(after=after, limit=limit, order=order)
        return self._list(route, query, Turn.model_validate, call)


class AsyncTurns(AsyncResource):
    """The async twin of :class:`Turns`."""

    async def retrieve(self, turn_id: str, *, session_id: str, **call: Unpack[CallOptions]) -> Turn:
        """Read one Turn of a Session."""
        return await self._call(_retrieve(session_id, turn_id), Turn.model_validate, call)

    def list(
        self,
        session_id: str,
        *,
        after: str | None = None,
        limit: int | None = None,
        order: Order | None = None,
        **call: Unpack[CallOptions],
    ) -> AsyncPageRequest[Turn]:
        """The Session's Turns: ``await`` for the first page, ``async for`` for all."""
        route = path(_ROOT, session_id=session_id)
        query = list_params(after=after, limit=limit, order=order)
        return self._list(route, query, Turn.model_validate, call)
