"""The official ``openai`` 3.51 client as an oracle: for the same call, both clients must
put the same method, path, query and JSON body on the wire.

openai 3.51 sends through ``httpx2``, which respx does not patch, so its requests are
answered by an ``httpx2.MockTransport`` with the same canned answers.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import httpx2
import openai
import pytest
import respx

from openagentcore import Client
from openagentcore.types import ToolResultEvent

from ._support import API_KEY, BASE_URL, corpus

PAGES = corpus("pages")
ANSWERS = {
    "agents": corpus("agents")["minimal"],
    "sessions": corpus("sessions")["idle_new"],
    "turns": corpus("turns")["completed_with_usage"],
}
TOOL: Any = {
    "type": "function",
    "name": "lookup_order",
    "description": "Look up an order by its number.",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
}
RESULT = corpus("input_events")["tool_result_explicit_nulls"]

Ours = Callable[[Client], Any]
Theirs = Callable[[openai.OpenAI], Any]
PAIRS: dict[str, tuple[Ours, Theirs]] = {
    "agents.create": (
        lambda c: c.agents.create(model="kimi-k3", name="Support", tools=[TOOL]),
        lambda o: o.beta.agents.create(model="kimi-k3", name="Support", tools=[TOOL]),
    ),
    "agents.retrieve": (
        lambda c: c.agents.retrieve("ag_1"),
        lambda o: o.beta.agents.retrieve("ag_1"),
    ),
    "agents.update": (
        lambda c: c.agents.update("ag_1", instructions="Be brief."),
        lambda o: o.beta.agents.update("ag_1", instructions="Be brief."),
    ),
    "agents.list": (
        lambda c: c.agents.list(after="ag_0", limit=3, order="asc"),
        lambda o: o.beta.agents.list(after="ag_0", limit=3, order="asc"),
    ),
    "agents.delete": (
        lambda c: c.agents.delete("ag_1"),
        lambda o: o.beta.agents.delete("ag_1"),
    ),
    "sessions.create": (
        lambda c: c.sessions.create(
            agent={"model": "kimi-k3", "tools": [TOOL]}, input="Where is A-1001?"
        ),
        lambda o: o.beta.agents.sessions.create(
            environment={"type": "none"},
            agent={"model": "kimi-k3", "tools": [TOOL]},
            input="Where is A-1001?",
        ),
    ),
    "sessions.retrieve": (
        lambda c: c.sessions.retrieve("se_1"),
        lambda o: o.beta.agents.sessions.retrieve("se_1"),
    ),
    "sessions.update": (
        lambda c: c.sessions.update("se_1", metadata={"customer": "acme"}),
        lambda o: o.beta.agents.sessions.update("se_1", metadata={"customer": "acme"}),
    ),
    "sessions.list": (
        lambda c: c.sessions.list(agent_id="ag_1", limit=10),
        lambda o: o.beta.agents.sessions.list(agent_id="ag_1", limit=10),
    ),
    "sessions.delete": (
        lambda c: c.sessions.delete("se_1"),
        lambda o: o.beta.agents.sessions.delete("se_1"),
    ),
    "events.create": (
        lambda c: c.sessions.events.create(
            "se_1", events=[ToolResultEvent.from_wire(RESULT)], idempotency_key="key-1"
        ),
        lambda o: o.beta.agents.sessions.events.create(
            "se_1", events=[RESULT], idempotency_key="key-1"
        ),
    ),
    "turns.retrieve": (
        lambda c: c.sessions.turns.retrieve("tu_1", session_id="se_1"),
        lambda o: o.beta.agents.sessions.turns.retrieve("tu_1", session_id="se_1"),
    ),
    "turns.list": (
        lambda c: c.sessions.turns.list("se_1", order="desc"),
        lambda o: o.beta.agents.sessions.turns.list("se_1", order="desc"),
    ),
    "items.list": (
        lambda c: c.sessions.items.list("se_1", limit=20),
        lambda o: o.beta.agents.sessions.items.list("se_1", limit=20),
    ),
}


def answer(method: str, path: str) -> tuple[int, Any]:
    last = path.rsplit("/", 1)[-1]
    if path.endswith("/events"):
        return 202, None
    if method == "DELETE":
        return 200, corpus("deleted")["session" if "/sessions/" in path else "agent"]
    if method == "GET" and last in PAGES:
        return 200, PAGES[last]
    family = "turns" if "/turns/" in path else "sessions" if "/sessions" in path else "agents"
    return 200, ANSWERS[family]


def ours_answer(request: httpx.Request) -> httpx.Response:
    status, body = answer(request.method, request.url.path)
    return httpx.Response(status, json=body) if body is not None else httpx.Response(status)


def wire(request: httpx.Request | httpx2.Request) -> dict[str, Any]:
    return {
        "method": request.method,
        "path": request.url.raw_path.split(b"?")[0].decode(),
        "query": sorted(request.url.params.multi_items()),
        "body": json.loads(request.content) if request.content else None,
        "beta": request.headers.get("OpenAI-Beta"),
        "idempotency_key": request.headers.get("Idempotency-Key"),
    }


def official_wire(call: Theirs) -> dict[str, Any]:
    seen: list[httpx2.Request] = []

    def handle(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        status, body = answer(request.method, request.url.path)
        return httpx2.Response(status, json=body) if body is not None else httpx2.Response(status)

    http = httpx2.Client(transport=httpx2.MockTransport(handle))
    with openai.OpenAI(api_key=API_KEY, base_url=BASE_URL, http_client=http) as official:
        call(official)
    (request,) = seen
    return wire(request)


@pytest.mark.parametrize("pair", PAIRS.values(), ids=PAIRS.keys())
def test_same_call_same_wire(pair: tuple[Ours, Theirs], api: respx.MockRouter) -> None:
    ours, theirs = pair
    route = api.route().mock(side_effect=ours_answer)
    with Client(api_key=API_KEY, base_url=BASE_URL) as client:
        ours(client)

    mine, reference = wire(route.calls.last.request), official_wire(theirs)

    # The SDK sends an Idempotency-Key on the two routes that honour one (Session
    # creation, event submission) so retries are safe; the official client sends one
    # only when asked. Where it was asked, they must agree.
    if reference["idempotency_key"] is None and mine["idempotency_key"] is not None:
        assert mine["method"] == "POST"
        assert mine["path"].endswith(("/agents/sessions", "/events")), mine["path"]
        assert mine.pop("idempotency_key").startswith("oac-")
        reference.pop("idempotency_key")
    assert mine == reference
