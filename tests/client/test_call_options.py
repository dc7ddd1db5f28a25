"""openai-python's per-request ergonomics: call options, ``with_options``,
``RetryPolicy`` on the client, ``with_raw_response``, and the trio fallback."""

from __future__ import annotations

import inspect
import json
import socket
from typing import Any

import httpx
import pytest
import respx

from openagentcore import (
    AsyncClient,
    Client,
    RawResponse,
    RetryPolicy,
    ServiceUnavailableError,
)
from openagentcore.resources import (
    Agents,
    AsyncAgents,
    AsyncEvents,
    AsyncItems,
    AsyncSessions,
    AsyncTurns,
    Events,
    Items,
    Sessions,
    Turns,
)

from . import _hostile as hostile
from ._support import API_KEY, BASE_URL, AnyClient, corpus, resolve

pytestmark = pytest.mark.anyio

AGENT = corpus("agents")["minimal"]
SESSION = corpus("sessions")["idle_new"]
UNAVAILABLE = {"error": {"type": "server_error", "code": "execution_unavailable", "message": "m"}}


async def test_extra_headers_query_and_body_reach_the_wire(
    client: AnyClient, api: respx.MockRouter
) -> None:
    route = api.post("agents").mock(return_value=httpx.Response(200, json=AGENT))

    await resolve(
        client.agents.create(
            model="m",
            extra_headers={"X-Trace": "t-1"},
            extra_query={"dry_run": "1"},
            extra_body={"future_field": {"on": True}},
        )
    )

    request = route.calls.last.request
    assert request.headers["X-Trace"] == "t-1"
    assert request.url.params["dry_run"] == "1"
    assert json.loads(request.content) == {"model": "m", "future_field": {"on": True}}


async def test_call_options_are_not_sent_as_fields(
    client: AnyClient, api: respx.MockRouter
) -> None:
    route = api.post("agents/sessions").mock(return_value=httpx.Response(200, json=SESSION))

    await resolve(client.sessions.create(agent_id="ag_1", timeout=5, max_retries=0))

    assert json.loads(route.calls.last.request.content) == {
        "environment": {"type": "none"},
        "agent_id": "ag_1",
    }


async def test_per_call_max_retries_replaces_the_clients(
    client: AnyClient, api: respx.MockRouter
) -> None:
    route = api.get("agents/ag_1").mock(return_value=httpx.Response(503, json=UNAVAILABLE))

    with pytest.raises(ServiceUnavailableError):
        await resolve(client.agents.retrieve("ag_1", max_retries=0))
    assert route.call_count == 1

    with pytest.raises(ServiceUnavailableError):
        await resolve(client.agents.retrieve("ag_1", max_retries=4))
    assert route.call_count == 1 + 5


async def test_list_calls_apply_their_options_to_every_page(
    client: AnyClient, api: respx.MockRouter
) -> None:
    first = {**SESSION, "id": "se_1"}
    second = {**SESSION, "id": "se_2"}
    pages = [
        {"data": [first], "has_more": True, "first_id": "se_1", "last_id": "se_1"},
        {"data": [second], "has_more": False, "first_id": "se_2", "last_id": "se_2"},
    ]
    route = api.get("agents/sessions").mock(
        side_effect=[httpx.Response(200, json=page) for page in pages]
    )

    page = await resolve(client.sessions.list(extra_headers={"X-Trace": "all"}))
    if hasattr(page, "__aiter__"):
        [item async for item in page]
    else:
        list(page)

    assert route.call_count == len(pages)
    assert all(call.request.headers["X-Trace"] == "all" for call in route.calls)


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_with_options_copies_settings_and_shares_connections(
    kind: str, api: respx.MockRouter
) -> None:
    route = api.get("agents/ag_1").mock(return_value=httpx.Response(503, json=UNAVAILABLE))
    cls = Client if kind == "sync" else AsyncClient
    client = cls(api_key=API_KEY, base_url=BASE_URL, max_retries=3)
    quick = client.with_options(max_retries=0, default_headers={"X-Team": "a"})

    assert type(quick) is cls
    assert quick._transport._http is client._transport._http
    with pytest.raises(ServiceUnavailableError):
        await resolve(quick.agents.retrieve("ag_1"))
    assert route.call_count == 1
    assert route.calls.last.request.headers["X-Team"] == "a"

    await resolve(quick.close())  # a copy never closes what it shares
    assert not client._transport._http.is_closed
    with pytest.raises(ServiceUnavailableError):
        await resolve(client.agents.retrieve("ag_1"))
    assert route.call_count == 1 + 4
    assert "X-Team" not in route.calls.last.request.headers
    await resolve(client.close())
    assert client._transport._http.is_closed


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_retry_policy_is_accepted_by_the_client(
    kind: str, api: respx.MockRouter, sleeps: list[float]
) -> None:
    route = api.get("agents/ag_1").mock(return_value=httpx.Response(503, json=UNAVAILABLE))
    policy = RetryPolicy(max_retries=1, initial_delay=0.0, max_delay=0.0)
    cls = Client if kind == "sync" else AsyncClient
    client = cls(api_key=API_KEY, base_url=BASE_URL, retry_policy=policy)

    with pytest.raises(ServiceUnavailableError):
        await resolve(client.agents.retrieve("ag_1"))
    await resolve(client.close())

    assert route.call_count == 2
    assert sleeps == [0.0]


async def test_with_raw_response_gives_headers_and_request_id(api: respx.MockRouter) -> None:
    api.get("agents/ag_1").mock(
        return_value=httpx.Response(200, json=AGENT, headers={"x-request-id": "req_42"})
    )
    with Client(api_key=API_KEY, base_url=BASE_URL) as client:
        raw = client.with_raw_response(lambda c: c.agents.retrieve("ag_1"))
    async with AsyncClient(api_key=API_KEY, base_url=BASE_URL) as async_client:
        async_raw = await async_client.with_raw_response(lambda c: c.agents.retrieve("ag_1"))

    for result in (raw, async_raw):
        assert isinstance(result, RawResponse)
        assert result.request_id == "req_42"
        assert result.status_code == 200
        assert result.headers["content-type"] == "application/json"
        assert result.parsed.id == AGENT["id"]


async def test_with_raw_response_needs_a_request() -> None:
    from openagentcore import OpenAgentCoreError

    with (
        Client(api_key=API_KEY, base_url=BASE_URL) as client,
        pytest.raises(OpenAgentCoreError, match="no request"),
    ):
        client.with_raw_response(lambda c: 1)


def _public_callables(cls: type) -> list[tuple[str, Any]]:
    return [
        (name, member)
        for name, member in inspect.getmembers(cls)
        if not name.startswith("_") and (inspect.isfunction(member) or isinstance(member, property))
    ]


@pytest.mark.parametrize(
    "cls",
    [
        Client,
        AsyncClient,
        Agents,
        AsyncAgents,
        Sessions,
        AsyncSessions,
        Events,
        AsyncEvents,
        Turns,
        AsyncTurns,
        Items,
        AsyncItems,
    ],
)
def test_every_public_method_has_a_docstring(cls: type) -> None:
    missing = [name for name, member in _public_callables(cls) if not inspect.getdoc(member)]
    assert inspect.getdoc(cls)
    assert missing == []


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_the_async_client_works_under_trio() -> None:
    """The asyncio backend used to break trio with "no running event loop"; under
    another loop the client now uses httpcore's anyio backend, deadline included."""
    with hostile.serving(hostile.answer(200, SESSION)) as server:
        async with AsyncClient(api_key=API_KEY, base_url=server.url) as client:
            session = await client.sessions.retrieve("se_1")
            again = await client.sessions.retrieve("se_1")
    assert session.id == again.id == SESSION["id"]


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_the_deadline_holds_under_trio() -> None:
    from openagentcore import APITimeoutError

    slow = hostile.response_bytes(200, json.dumps(SESSION).encode())
    with hostile.serving(hostile.trickle(slow, 0.25)) as server:
        async with AsyncClient(
            api_key=API_KEY, base_url=server.url, timeout=1.0, max_retries=0
        ) as client:
            with pytest.raises(APITimeoutError):
                await client.sessions.retrieve("se_1")


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_retries_wait_under_trio() -> None:
    """The wait between attempts is trio's own under trio (asyncio's sleep needs an
    asyncio loop): a 503 is retried and the retry succeeds."""

    def unavailable_then_ok(
        conn: socket.socket, request: hostile.Request, server: hostile.HostileServer
    ) -> None:
        first = len(server.requests) == 1
        body = b"{}" if first else json.dumps(SESSION).encode()
        conn.sendall(hostile.response_bytes(503 if first else 200, body))

    policy = RetryPolicy(max_retries=1, initial_delay=0.01)
    with hostile.serving(unavailable_then_ok) as server:
        async with AsyncClient(api_key=API_KEY, base_url=server.url, retry_policy=policy) as client:
            session = await client.sessions.retrieve("se_1")
    assert session.id == SESSION["id"]
    assert len(server.requests) == 2


async def test_the_asyncio_backend_can_be_turned_off() -> None:
    with hostile.serving(hostile.answer(200, SESSION)) as server:
        async with AsyncClient(
            api_key=API_KEY, base_url=server.url, native_asyncio=False
        ) as client:
            backend = client._transport._http._transport.pool._network_backend  # type: ignore[attr-defined]
            session = await client.sessions.retrieve("se_1")
    import httpcore

    assert isinstance(backend.backend, httpcore.AnyIOBackend)
    assert session.id == SESSION["id"]
