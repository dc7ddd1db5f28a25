"""``client.sessions.items``: the Session's durable history of Items."""

from __future__ import annotations

from typing_extensions import Unpack

from .._pagination import AsyncPageRequest, Order, SyncPage, list_params
from ..types import Item, parse_item
from ._base import AsyncResource, CallOptions, SyncResource, path

__all__ = ["AsyncItems", "Items"]

_ROOT = "agents/sessions/{session_id}/items"


class Items(SyncResource):
    """``client.sessions.items``: read a Session's durable history."""

    def list(
        self,
        session_id: str,
        *,
        after: str | None = None,
        limit: int | None = None,
        order: Order | None = None,
        **call: Unpack[CallOptions],
    ) -> SyncPage[Item]:
        """One page of the Session's Items; iterating it walks every following page."""
        route = path(_ROOT, session_id=session_id)
        query = list_params(after=after, limit=limit, order=order)
        return self._list(route, query, parse_item, call)


class AsyncItems(AsyncResource):
    """The async twin of :class:`Items`."""

    def list(
        self,
        session_id: str,
        *,
        after: str | None = None,
        limit: int | None = None,
        order: Order | None = None,
        **call: Unpack[CallOptions],
    ) -> AsyncPageRequest[Item]:
        """The Session's Items: ``await`` for the first page, ``async for`` for all."""
        route = path(_ROOT, session_id=session_id)
        query = list_params(after=after, limit=limit, order=order)
        return self._list(route, query, parse_item, call)
