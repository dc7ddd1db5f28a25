"""Every route, through both clients: method, path, headers, query, body and result type."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import respx

from openagentcore import AsyncClient, Client
from openagentcore._pagination import AsyncPage, SyncPage
from openagentcore.types import (
    Agent,
    AgentDeleted,
    FunctionCallItem,
    FunctionTool,
    InputMessageEvent,
    MessageItem,
    Session,
    SessionDeleted,
    ToolResultEvent,
    Turn,
    UserMessage,
)

from ._support import API_KEY, BASE_URL, AnyClient, corpus, resolve, sent_json

pytestmark = pytest.mark.anyio

AGENT = corpus("agents")["minimal"]
SESSION = corpus("sessions")["idle_new"]
TURN = corpus("turns")["completed_with_usage"]
PAGES = corpus("pages")
DELETED = corpus("deleted")
INPUT = corpus("input_events")
NO_BODY = object()
LOOKUP = {
    "type": "function",
    "name": "lookup_order",
    "description": "Look up an order by its number.",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
}


@dataclass(frozen=True)
class Route:
    """One client call and what must go over the wire for it."""

    call: Callable[[Any], Any]
    method: str
    path: str
    answer: httpx.Response
    returns: type | tuple[type, ...]
    body: Any = NO_BODY
    query: dict[str, str] = field(default_factory=dict)


def ok(payload: Any) -> httpx.Response:
    return httpx.Response(200, json=payload)


ROUTES: dict[str, Route] = {
    "agents.create": Route(
        lambda c: c.agents.create(model="kimi-k3", name="Support", metadata=None),
        "POST",
        "/v1/agents",
        ok(AGENT),
        Agent,
        body={"model": "kimi-k3", "name": "Support", "metadata": None},
    ),
    "agents.create with a typed tool": Route(
        lambda c: c.agents.create(model="kimi-k3", tools=[FunctionTool.model_validate(LOOKUP)]),
        "POST",
        "/v1/agents",
        ok(AGENT),
        Agent,
        body={"model": "kimi-k3", "tools": [LOOKUP]},
    ),
    "agents.retrieve": Route(
        lambda c: c.agents.retrieve("ag_1"), "GET", "/v1/agents/ag_1", ok(AGENT), Agent
    ),
    "agents.update": Route(
        lambda c: c.agents.update("ag_1", instructions=None),
        "POST",
        "/v1/agents/ag_1",
        ok(AGENT),
        Agent,
        body={"instructions": None},
    ),
    "agents.list": Route(
        lambda c: c.agents.list(limit=5, order="asc"),
        "GET",
        "/v1/agents",
        ok(PAGES["agents"]),
        (SyncPage, AsyncPage),
        query={"limit": "5", "order": "asc"},
    ),
    "agents.delete": Route(
        lambda c: c.agents.delete("ag_1"),
        "DELETE",
        "/v1/agents/ag_1",
        ok(DELETED["agent"]),
        AgentDeleted,
    ),
    "sessions.create": Route(
        lambda c: c.sessions.create(agent_id="ag_1", input="Where is A-1001?"),
        "POST",
        "/v1/agents/sessions",
        ok(SESSION),
        Session,
        body={"environment": {"type": "none"}, "agent_id": "ag_1", "input": "Where is A-1001?"},
    ),
    "sessions.create with typed input and tools": Route(
        lambda c: c.sessions.create(
            agent={"model": "kimi-k3", "tools": [FunctionTool.model_validate(LOOKUP)]},
            input=[UserMessage.from_text("Where is A-1001?")],
        ),
        "POST",
        "/v1/agents/sessions",
        ok(SESSION),
        Session,
        body={
            "environment": {"type": "none"},
            "agent": {"model": "kimi-k3", "tools": [LOOKUP]},
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "Where is A-1001?"}]}
            ],
        },
    ),
    "sessions.create with an environment": Route(
        lambda c: c.sessions.create(agent_id="ag_1", environment={"type": "openai_hosted"}),
        "POST",
        "/v1/agents/sessions",
        ok(SESSION),
        Session,
        body={"environment": {"type": "openai_hosted"}, "agent_id": "ag_1"},
    ),
    "sessions.retrieve": Route(
        lambda c: c.sessions.retrieve("se_1"),
        "GET",
        "/v1/agents/sessions/se_1",
        ok(SESSION),
        Session,
    ),
    "sessions.retrieve quotes the id": Route(
        lambda c: c.sessions.retrieve("se 1?x#y%"),
        "GET",
        "/v1/agents/sessions/se%201%3Fx%23y%25",
        ok(SESSION),
        Session,
    ),
    "sessions.update": Route(
        lambda c: c.sessions.update("se_1", metadata={"customer": "acme"}),
        "POST",
        "/v1/agents/sessions/se_1",
        ok(SESSION),
        Session,
        body={"metadata": {"customer": "acme"}},
    ),
    "sessions.list": Route(
        lambda c: c.sessions.list(agent_id="ag_1", after="se_0"),
        "GET",
        "/v1/agents/sessions",
        ok(PAGES["sessions"]),
        (SyncPage, AsyncPage),
        query={"agent_id": "ag_1", "after": "se_0"},
    ),
    "sessions.delete": Route(
        lambda c: c.sessions.delete("se_1"),
        "DELETE",
        "/v1/agents/sessions/se_1",
        ok(DELETED["session"]),
        SessionDeleted,
    ),
    "events.create": Route(
        lambda c: c.sessions.events.create(
            "se_1",
            events=[InputMessageEvent.from_text("hi"), {"type": "agent.session.input.cancel"}],
        ),
        "POST",
        "/v1/agents/sessions/se_1/events",
        httpx.Response(202),
        type(None),
        body={
            "events": [
                {
                    "type": "agent.session.input.message",
                    "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
                },
                {"type": "agent.session.input.cancel"},
            ]
        },
    ),
    "turns.retrieve": Route(
        lambda c: c.sessions.turns.retrieve("tu_1", session_id="se_1"),
        "GET",
        "/v1/agents/sessions/se_1/turns/tu_1",
        ok(TURN),
        Turn,
    ),
    "turns.list": Route(
        lambda c: c.sessions.turns.list("se_1", order="desc"),
        "GET",
        "/v1/agents/sessions/se_1/turns",
        ok(PAGES["turns"]),
        (SyncPage, AsyncPage),
        query={"order": "desc"},
    ),
    "items.list": Route(
        lambda c: c.sessions.items.list("se_1", limit=100),
        "GET",
        "/v1/agents/sessions/se_1/items",
        ok(PAGES["items"]),
        (SyncPage, AsyncPage),
        query={"limit": "100"},
    ),
}


@pytest.mark.parametrize("route", ROUTES.values(), ids=ROUTES.keys())
async def test_route_sends_the_contract_request_and_parses_the_answer(
    client: AnyClient, api: respx.MockRouter, route: Route
) -> None:
    mocked = api.request(route.method, route.path.removeprefix("/v1/")).mock(
        return_value=route.answer
    )

    result = await resolve(route.call(client))

    assert isinstance(result, route.returns)
    assert mocked.call_count == 1
    request = mocked.calls.last.request
    assert request.url.raw_path.split(b"?")[0].decode() == route.path
    assert dict(request.url.params) == route.query
    assert request.headers["Authorization"] == f"Bearer {API_KEY}"
    assert request.headers["OpenAI-Beta"] == "agents=v1"
    assert request.headers["Accept"] == "application/json"
    assert request.headers["User-Agent"].startswith("openagentcore-python/")
    if route.method == "POST":
        # Only Session creation and event submission honour an Idempotency-Key.
        if route.path.endswith(("/agents/sessions", "/events")):
            assert request.headers["Idempotency-Key"].startswith("oac-")
        else:
            assert "Idempotency-Key" not in request.headers
        assert request.headers["Content-Type"] == "application/json"
        assert sent_json(request) == route.body
    else:
        assert "Idempotency-Key" not in request.headers
        assert request.content == b""


async def test_list_pages_hold_typed_entries(client: AnyClient, api: respx.MockRouter) -> None:
    api.get("agents/sessions/se_1/items").mock(return_value=ok(PAGES["items"]))

    page = await resolve(client.sessions.items.list("se_1"))

    kinds = {type(item) for item in page.data}
    assert MessageItem in kinds
    assert FunctionCallItem in kinds
    assert page.has_more is True
    assert page.last_id == PAGES["items"]["last_id"]


@pytest.mark.parametrize(
    ("case", "sent"),
    [
        ("tool_result_output_only", {"output": "shipped"}),
        ("tool_result_both_omitted", {}),
        ("tool_result_explicit_nulls", {"output": None, "error": None}),
    ],
)
async def test_tool_result_keeps_field_presence(
    client: AnyClient, api: respx.MockRouter, case: str, sent: dict[str, Any]
) -> None:
    mocked = api.post("agents/sessions/se_1/events").mock(return_value=httpx.Response(202))
    event = ToolResultEvent.from_wire(INPUT[case])

    await resolve(client.sessions.events.create("se_1", events=[event]))

    (wire,) = sent_json(mocked.calls.last.request)["events"]
    assert wire == INPUT[case]
    assert {key: wire[key] for key in ("output", "error") if key in wire} == sent


async def test_tool_result_built_in_code_sends_only_given_fields(
    client: AnyClient, api: respx.MockRouter
) -> None:
    mocked = api.post("agents/sessions/se_1/events").mock(return_value=httpx.Response(202))
    omitted = ToolResultEvent(turn_id="tu_1", call_id="call_1", success=True)
    explicit = ToolResultEvent(turn_id="tu_1", call_id="call_2", success=False, output=None)

    await resolve(client.sessions.events.create("se_1", events=[omitted, explicit]))

    first, second = sent_json(mocked.calls.last.request)["events"]
    assert "output" not in first
    assert "error" not in first
    assert second["output"] is None
    assert "error" not in second


async def test_caller_idempotency_key_is_sent_as_given(
    client: AnyClient, api: respx.MockRouter
) -> None:
    events = api.post("agents/sessions/se_1/events").mock(return_value=httpx.Response(202))
    sessions = api.post("agents/sessions").mock(return_value=ok(SESSION))

    await resolve(
        client.sessions.events.create(
            "se_1", events=[InputMessageEvent.from_text("hi")], idempotency_key="order-A-1001"
        )
    )
    await resolve(client.sessions.create(agent_id="ag_1", idempotency_key="k" * 128))

    assert events.calls.last.request.headers["Idempotency-Key"] == "order-A-1001"
    assert sessions.calls.last.request.headers["Idempotency-Key"] == "k" * 128


async def test_each_logical_call_gets_its_own_idempotency_key(
    client: AnyClient, api: respx.MockRouter
) -> None:
    mocked = api.post("agents/sessions").mock(return_value=ok(SESSION))

    await resolve(client.sessions.create(agent_id="ag_1"))
    await resolve(client.sessions.create(agent_id="ag_1"))

    first, second = (call.request.headers["Idempotency-Key"] for call in mocked.calls)
    assert first != second


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("k" * 129, "must be 1 to 128 bytes"),
        ("é" * 65, "must be 1 to 128 bytes"),
        ("", "must be 1 to 128 bytes"),
        ("   ", "not only whitespace"),
        ("clé-1", "must be printable ASCII"),
        ("line\nbreak", "must be printable ASCII"),
    ],
    ids=["129 bytes", "130 bytes in 65 characters", "empty", "blank", "non-ascii", "newline"],
)
async def test_bad_idempotency_key_is_refused_before_any_request(
    client: AnyClient, api: respx.MockRouter, key: str, message: str
) -> None:
    mocked = api.post("agents/sessions/se_1/events")

    with pytest.raises(ValueError, match=message) as caught:
        await resolve(
            client.sessions.events.create(
                "se_1", events=[InputMessageEvent.from_text("hi")], idempotency_key=key
            )
        )
    assert type(caught.value) is ValueError, "a plain, explained ValueError"
    assert str(caught.value).startswith("idempotency_key must be")
    assert not mocked.called


async def test_empty_ids_are_refused_before_any_request(
    client: AnyClient, api: respx.MockRouter
) -> None:
    with pytest.raises(ValueError, match="`session_id`"):
        await resolve(client.sessions.retrieve(" "))
    with pytest.raises(ValueError, match="`turn_id`"):
        await resolve(client.sessions.turns.retrieve("", session_id="se_1"))
    assert not api.calls


async def test_event_batches_over_64_are_refused_before_any_request(
    client: AnyClient, api: respx.MockRouter
) -> None:
    batch = [InputMessageEvent.from_text(str(n)) for n in range(65)]

    with pytest.raises(ValueError, match="65 events; a batch takes at most 64"):
        await resolve(client.sessions.events.create("se_1", events=batch))
    assert not api.calls


async def test_default_headers_are_sent_on_every_request(api: respx.MockRouter) -> None:
    mocked = api.get("agents/ag_1").mock(return_value=ok(AGENT))
    headers = {"X-Team": "billing"}
    with Client(api_key=API_KEY, base_url=BASE_URL, default_headers=headers) as sync_client:
        sync_client.agents.retrieve("ag_1")
    async with AsyncClient(
        api_key=API_KEY, base_url=BASE_URL, default_headers=headers
    ) as async_client:
        await async_client.agents.retrieve("ag_1")

    assert [call.request.headers["X-Team"] for call in mocked.calls] == ["billing", "billing"]
