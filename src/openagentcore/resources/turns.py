"""``client.sessions.turns``: the durable record of each Turn."""

from __future__ import annotations

from .._base_client import RequestOptions
from .._pagination import AsyncPageRequest, Order, SyncPage, list_params
from ..types import Turn
from ._base import AsyncResource, SyncResource, path

__all__ = ["AsyncTurns", "Turns"]

_ROOT = "agents/sessions/{session_id}/turns"
_ONE = "agents/sessions/{session_id}/turns/{turn_id}"


def _retrieve(session_id: str, turn_id: str) -> RequestOptions:
    return RequestOptions("GET", path(_ONE, session_id=session_id, turn_id=turn_id))


class Turns(SyncResource):
    def retrieve(self, turn_id: str, *, session_id: str) -> Turn:
        return self._call(_retrieve(session_id, turn_id), Turn.model_validate)

    def list(
        self,
        session_id: str,
        *,
        after: str | None = None,
        limit: int | None = None,
        order: Order | None = None,
    ) -> SyncPage[Turn]:
        route = path(_ROOT, session_id=session_id)
        return self._list(
            route, list_params(after=after, limit=limit, order=order), Turn.model_validate
        )


class AsyncTurns(AsyncResource):
    async def retrieve(self, turn_id: str, *, session_id: str) -> Turn:
        return await self._call(_retrieve(session_id, turn_id), Turn.model_validate)

    def list(
        self,
        session_id: str,
        *,
        after: str | None = None,
        limit: int | None = None,
        order: Order | None = None,
    ) -> AsyncPageRequest[Turn]:
        route = path(_ROOT, session_id=session_id)
        return self._list(
            route, list_params(after=after, limit=limit, order=order), Turn.model_validate
        )
