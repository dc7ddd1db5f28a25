"""``client.sessions.items``: the Session's durable history of Items."""

from __future__ import annotations

from .._pagination import AsyncPageRequest, Order, SyncPage, list_params
from ..types import Item, parse_item
from ._base import AsyncResource, SyncResource, path

__all__ = ["AsyncItems", "Items"]

_ROOT = "agents/sessions/{session_id}/items"


class Items(SyncResource):
    def list(
        self,
        session_id: str,
        *,
        after: str | None = None,
        limit: int | None = None,
        order: Order | None = None,
    ) -> SyncPage[Item]:
        route = path(_ROOT, session_id=session_id)
        return self._list(route, list_params(after=after, limit=limit, order=order), parse_item)


class AsyncItems(AsyncResource):
    def list(
        self,
        session_id: str,
        *,
        after: str | None = None,
        limit: int | None = None,
        order: Order | None = None,
    ) -> AsyncPageRequest[Item]:
        route = path(_ROOT, session_id=session_id)
        return self._list(route, list_params(after=after, limit=limit, order=order), parse_item)
