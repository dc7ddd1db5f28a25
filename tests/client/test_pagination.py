"""Cursor pages: ``after=<last_id>`` walks, await vs ``async for``, and limit checks."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import respx

from openagentcore import AsyncClient
from openagentcore._errors import APIResponseValidationError, OpenAgentCoreError
from openagentcore._pagination import AsyncPage, SyncPage
from openagentcore.types import Session

from ._support import AnyClient, collect, corpus, resolve

pytestmark = pytest.mark.anyio

SESSION = corpus("sessions")["idle_new"]


def session(session_id: str) -> dict[str, Any]:
    return {**SESSION, "id": session_id}


def page(ids: list[str], *, has_more: bool) -> httpx.Response:
    return httpx.Response(
        200,
        json={
            "object": "list",
            "data": [session(i) for i in ids],
            "first_id": ids[0] if ids else None,
            "last_id": ids[-1] if ids else None,
            "has_more": has_more,
        },
    )


THREE_PAGES = [
    page(["se_1", "se_2"], has_more=True),
    page(["se_3", "se_4"], has_more=True),
    page(["se_5"], has_more=False),
]


async def test_iterating_a_list_walks_every_page_with_after(
    client: AnyClient, api: respx.MockRouter
) -> None:
    route = api.get("agents/sessions").mock(side_effect=THREE_PAGES)

    sessions = await collect(client.sessions.list(limit=2, agent_id="ag_1"))

    assert [s.id for s in sessions] == ["se_1", "se_2", "se_3", "se_4", "se_5"]
    assert all(isinstance(s, Session) for s in sessions)
    assert [dict(call.request.url.params) for call in route.calls] == [
        {"limit": "2", "agent_id": "ag_1"},
        {"limit": "2", "agent_id": "ag_1", "after": "se_2"},
        {"limit": "2", "agent_id": "ag_1", "after": "se_4"},
    ]


async def test_pages_are_fetched_lazily(client: AnyClient, api: respx.MockRouter) -> None:
    route = api.get("agents/sessions").mock(side_effect=THREE_PAGES)

    first = await resolve(client.sessions.list())

    assert isinstance(first, (SyncPage, AsyncPage))
    assert [s.id for s in first.data] == ["se_1", "se_2"]
    assert first.has_next_page()
    assert route.call_count == 1


async def test_next_page_continues_after_the_last_id(
    client: AnyClient, api: respx.MockRouter
) -> None:
    route = api.get("agents/sessions").mock(side_effect=THREE_PAGES)

    first = await resolve(client.sessions.list(order="desc"))
    second = await resolve(first.next_page())

    assert [s.id for s in second.data] == ["se_3", "se_4"]
    assert dict(route.calls.last.request.url.params) == {"order": "desc", "after": "se_2"}


async def test_next_page_on_the_last_page_says_to_check_first(
    client: AnyClient, api: respx.MockRouter
) -> None:
    api.get("agents/sessions").mock(return_value=page(["se_1"], has_more=False))
    only = await resolve(client.sessions.list())

    assert not only.has_next_page()
    with pytest.raises(OpenAgentCoreError, match=r"check has_next_page\(\) first"):
        await resolve(only.next_page())


async def test_empty_page_promising_more_is_refused(
    client: AnyClient, api: respx.MockRouter
) -> None:
    """An empty page with has_more would make iteration spin forever (issue 13)."""
    route = api.get("agents/sessions").mock(return_value=page([], has_more=True))

    with pytest.raises(APIResponseValidationError, match="empty but has_more"):
        await collect(client.sessions.list())
    assert route.call_count == 1


async def test_iter_pages_yields_each_page(client: AnyClient, api: respx.MockRouter) -> None:
    api.get("agents/sessions").mock(side_effect=THREE_PAGES)

    first = await resolve(client.sessions.list())
    pages = await collect(first.iter_pages())

    assert [[s.id for s in p.data] for p in pages] == [["se_1", "se_2"], ["se_3", "se_4"], ["se_5"]]


async def test_async_list_is_both_awaitable_and_async_iterable(api: respx.MockRouter) -> None:
    route = api.get("agents/sessions").mock(side_effect=[THREE_PAGES[0], *THREE_PAGES])
    async with AsyncClient(api_key="sk-test", base_url="https://api.test/v1") as async_client:
        first = await async_client.sessions.list()
        every = [s.id async for s in async_client.sessions.list()]

    assert isinstance(first, AsyncPage)
    assert [s.id for s in first.data] == ["se_1", "se_2"]
    assert every == ["se_1", "se_2", "se_3", "se_4", "se_5"]
    assert route.call_count == 4, "await fetched one page, async for fetched three"


async def test_each_list_route_pages_with_after(client: AnyClient, api: respx.MockRouter) -> None:
    pages = corpus("pages")
    more = {**pages["turns"], "has_more": True}
    turns = api.get("agents/sessions/se_1/turns").mock(
        side_effect=[httpx.Response(200, json=more), httpx.Response(200, json=pages["empty"])]
    )
    agents = api.get("agents").mock(
        side_effect=[
            httpx.Response(200, json={**pages["agents"], "has_more": True}),
            httpx.Response(200, json=pages["empty"]),
        ]
    )

    assert len(await collect(client.sessions.turns.list("se_1"))) == len(more["data"])
    assert len(await collect(client.agents.list())) == len(pages["agents"]["data"])

    assert turns.calls.last.request.url.params["after"] == more["last_id"]
    assert agents.calls.last.request.url.params["after"] == pages["agents"]["last_id"]


@pytest.mark.parametrize("limit", [0, -1, 101])
async def test_limit_outside_1_to_100_is_refused_before_any_request(
    client: AnyClient, api: respx.MockRouter, limit: int
) -> None:
    for call in (
        lambda: client.sessions.list(limit=limit),
        lambda: client.agents.list(limit=limit),
        lambda: client.sessions.turns.list("se_1", limit=limit),
        lambda: client.sessions.items.list("se_1", limit=limit),
    ):
        with pytest.raises(ValueError, match=f"limit must be between 1 and 100, got {limit}"):
            await resolve(call())
    assert not api.calls


async def test_unknown_order_is_refused_before_any_request(
    client: AnyClient, api: respx.MockRouter
) -> None:
    with pytest.raises(ValueError, match="order must be 'asc' or 'desc', got 'newest'"):
        await resolve(client.sessions.list(order="newest"))  # type: ignore[arg-type]
    assert not api.calls


async def test_page_repr_is_short(client: AnyClient, api: respx.MockRouter) -> None:
    api.get("agents/sessions").mock(side_effect=THREE_PAGES)

    first = await resolve(client.sessions.list())

    assert repr(first).endswith("(data=<2 items>, has_more=True, last_id='se_2')")
