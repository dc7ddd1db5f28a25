"""Cursor pages: ``data`` plus ``after``-based iteration across every page.

A page knows how to fetch the next one (the same list call with ``after`` set to its
``last_id``), so ``for item in client.sessions.list():`` walks the whole list lazily.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator, Mapping
from typing import Any, Generic, Literal, TypeVar

from ._errors import OpenAgentCoreError

__all__ = ["AsyncPage", "AsyncPageRequest", "Order", "SyncPage", "check_page", "list_params"]

T = TypeVar("T")

Order = Literal["asc", "desc"]


def list_params(*, after: str | None, limit: int | None, order: Order | None) -> dict[str, Any]:
    if limit is not None and not 1 <= limit <= 100:
        raise ValueError(f"limit must be between 1 and 100, got {limit}")
    if order is not None and order not in ("asc", "desc"):
        raise ValueError(f"order must be 'asc' or 'desc', got {order!r}")
    return {"after": after, "limit": limit, "order": order}


class _Page(Generic[T]):
    def __init__(self, body: Mapping[str, Any], parse: Callable[[Any], T]) -> None:
        raw = body.get("data")
        if not isinstance(raw, list):
            raise ValueError("a list response needs a `data` array")
        self.data: list[T] = [parse(item) for item in raw]
        self.has_more: bool = bool(body.get("has_more"))
        self.first_id: str | None = body.get("first_id")
        self.last_id: str | None = body.get("last_id")

    def has_next_page(self) -> bool:
        """Whether another page follows this one."""
        return self.has_more and bool(self.last_id)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(data=<{len(self.data)} items>, has_more={self.has_more}, "
            f"last_id={self.last_id!r})"
        )


def check_page(page: _Page[Any], seen: frozenset[str]) -> None:
    """Refuse (``ValueError``, reported as a response validation error) a page that
    would make iteration loop forever: one promising more while empty, or one whose
    cursor was already visited in this walk."""
    if not page.has_more:
        return
    if not page.data:
        raise ValueError("the page is empty but has_more is true; iteration would not end")
    if page.last_id is not None and page.last_id in seen:
        raise ValueError(
            f"the page's last_id {page.last_id!r} was already visited; iteration would loop"
        )


class SyncPage(_Page[T]):
    """One page of a list; iterating it yields every item of every following page."""

    def __init__(
        self,
        body: Mapping[str, Any],
        parse: Callable[[Any], T],
        fetch: Callable[[str], SyncPage[T]],
    ) -> None:
        super().__init__(body, parse)
        self._fetch = fetch

    def next_page(self) -> SyncPage[T]:
        """Fetch the page after this one; check `has_next_page` first."""
        if not self.has_next_page() or self.last_id is None:
            raise OpenAgentCoreError("No next page; check has_next_page() first")
        return self._fetch(self.last_id)

    def iter_pages(self) -> Iterator[SyncPage[T]]:
        """This page, then each following one, fetched as the loop reaches it."""
        page = self
        yield page
        while page.has_next_page():
            page = page.next_page()
            yield page

    def __iter__(self) -> Iterator[T]:
        for page in self.iter_pages():
            yield from page.data


class AsyncPage(_Page[T]):
    """The async twin of :class:`SyncPage`."""

    def __init__(
        self,
        body: Mapping[str, Any],
        parse: Callable[[Any], T],
        fetch: Callable[[str], Awaitable[AsyncPage[T]]],
    ) -> None:
        super().__init__(body, parse)
        self._fetch = fetch

    async def next_page(self) -> AsyncPage[T]:
        """Fetch the page after this one; check `has_next_page` first."""
        if not self.has_next_page() or self.last_id is None:
            raise OpenAgentCoreError("No next page; check has_next_page() first")
        return await self._fetch(self.last_id)

    async def iter_pages(self) -> AsyncIterator[AsyncPage[T]]:
        """This page, then each following one, fetched as the loop reaches it."""
        page = self
        yield page
        while page.has_next_page():
            page = await page.next_page()
            yield page

    async def __aiter__(self) -> AsyncIterator[T]:
        async for page in self.iter_pages():
            for item in page.data:
                yield item


class AsyncPageRequest(Generic[T]):
    """What an async ``list()`` returns: ``await`` it for the first page, or
    ``async for`` over it for every item."""

    def __init__(self, first: Callable[[], Awaitable[AsyncPage[T]]]) -> None:
        self._first = first

    def __await__(self) -> Generator[Any, None, AsyncPage[T]]:
        return self._first().__await__()

    async def __aiter__(self) -> AsyncIterator[T]:
        page = await self._first()
        async for item in page:
            yield item
