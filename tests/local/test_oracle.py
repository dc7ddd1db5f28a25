"""openai 3.51 as an oracle: its client drives the emulator, its types parse every body."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest
from openai.types.beta import Agent, AgentDeleted, AgentSession, AgentSessionDeleted
from openai.types.beta.agent_session_item import AgentSessionItem
from openai.types.beta.agents.sessions import Turn
from pydantic import BaseModel, TypeAdapter

from openagentcore.local import LocalCore, Scenario, TurnScript

from ._support import FUNCTION_TOOLS, Api, parse_strict

ITEM_ADAPTER: TypeAdapter[Any] = TypeAdapter(AgentSessionItem)

# The first Turn answers at once, so the Session is idle for sessions.stream; later
# Turns use the default script: every declared function at once.
READY_FIRST = Scenario(turns=[TurnScript(answer="ready")])


@pytest.fixture
def oracle_core(make_core: Callable[..., LocalCore]) -> LocalCore:
    return make_core(scenario=READY_FIRST)


@pytest.fixture
def oracle(oracle_core: LocalCore) -> Iterator[openai.OpenAI]:
    client = openai.OpenAI(
        base_url=oracle_core.base_url, api_key=oracle_core.api_key, max_retries=0
    )
    yield client
    client.close()


def test_openai_stream_helper_completes_a_turn_with_several_calls(oracle: openai.OpenAI) -> None:
    sessions = oracle.beta.agents.sessions
    agent: Any = {"tools": FUNCTION_TOOLS}
    session = sessions.create(environment={"type": "none"}, agent=agent, input="hi")
    _wait_idle(oracle, session.id)
    calls: list[tuple[str, dict[str, Any]]] = []

    def add(arguments: dict[str, Any]) -> str:
        calls.append(("add", arguments))
        return str(arguments["a"] + arguments["b"])

    def lookup(arguments: dict[str, Any]) -> str:
        calls.append(("lookup", arguments))
        return f"meaning of {arguments['word']}"

    with sessions.stream(
        session.id, input="add and look up", tool_handlers={"add": add, "lookup": lookup}
    ) as stream:
        types = [event.type for event in stream]
    assert sorted(calls) == [("add", {"a": 1, "b": 1}), ("lookup", {"word": "example word"})]
    assert types[-1] == "agent.session.idle"
    assert "agent.session.requires_action" in types
    final = sessions.retrieve(session.id)
    assert final.status == "idle"
    assert final.required_actions == []
    items = list(sessions.items.list(session.id, order="asc"))
    assert items[-1].type == "message"
    assert items[-1].content[0].text == "Results: add: 2; lookup: meaning of example word."  # type: ignore[union-attr]


def test_openai_client_reads_every_route(oracle: openai.OpenAI) -> None:
    agents = oracle.beta.agents
    agent = agents.create(model="m", name="a", tools=FUNCTION_TOOLS)  # type: ignore[arg-type]
    assert agents.retrieve(agent.id).name == "a"
    assert agents.update(agent.id, instructions="x").instructions == "x"
    assert [a.id for a in agents.list()] == [agent.id]
    session = agents.sessions.create(environment={"type": "none"}, agent_id=agent.id, input="hi")
    assert agents.sessions.update(session.id, metadata={"k": "v"}).metadata == {"k": "v"}
    assert session.id in [s.id for s in agents.sessions.list()]
    turns = list(agents.sessions.turns.list(session.id))
    assert agents.sessions.turns.retrieve(turns[0].id, session_id=session.id).id == turns[0].id
    assert list(agents.sessions.items.list(session.id))
    agents.sessions.events.create(session.id, events=[{"type": "agent.session.input.cancel"}])
    _wait_idle(oracle, session.id)
    assert agents.sessions.delete(session.id).deleted is True
    assert agents.delete(agent.id).deleted is True
    with pytest.raises(openai.NotFoundError):
        agents.sessions.retrieve(session.id)


def _wait_idle(client: openai.OpenAI, session_id: str) -> None:
    deadline = time.monotonic() + 5
    while client.beta.agents.sessions.retrieve(session_id).status != "idle":
        assert time.monotonic() < deadline, "the Session never became idle"
        time.sleep(0.005)


def test_raw_bodies_parse_strictly(oracle_core: LocalCore) -> None:
    api = Api(oracle_core)
    agent = api.http.post("/agents", json={"model": "m", "tools": FUNCTION_TOOLS}).json()
    parse_strict(Agent, agent)
    session = api.create_session(agent_id=agent["id"])
    api.run_turn_with_results(session["id"], lambda _: "out")
    api.post_events(
        session["id"],
        [
            {
                "type": "agent.session.input.message",
                "input": [{"role": "user", "content": [{"type": "input_text", "text": "more"}]}],
            }
        ],
    )
    api.run_turn_with_results(session["id"], lambda _: "out")
    parse_strict(AgentSession, api.session(session["id"]))
    for turn in api.http.get(f"/agents/sessions/{session['id']}/turns").json()["data"]:
        parse_strict(Turn, turn)
        turn_items = api.http.get(
            f"/agents/sessions/{session['id']}/turns/{turn['id']}/items"
        ).json()
        for item in turn_items["data"]:
            parse_strict(ITEM_ADAPTER, item)
    kinds = set()
    for item in api.items(session["id"]):
        parse_strict(ITEM_ADAPTER, item)
        kinds.add(item["type"])
    assert kinds == {"message", "function_call", "function_call_output"}
    parse_strict(AgentSessionDeleted, api.http.delete(f"/agents/sessions/{session['id']}").json())
    parse_strict(AgentDeleted, api.http.delete(f"/agents/{agent['id']}").json())
    api.close()


def test_openai_creation_stream_runs_tool_handlers(make_core: Callable[..., LocalCore]) -> None:
    core = make_core()
    client = openai.OpenAI(base_url=core.base_url, api_key=core.api_key, max_retries=0)
    handlers: Any = {"add": lambda a: str(a["a"] + a["b"]), "lookup": lambda a: a["word"].upper()}
    agent: Any = {"tools": FUNCTION_TOOLS}
    stream = client.beta.agents.sessions.create(
        environment={"type": "none"}, agent=agent, input="hi", stream=True, tool_handlers=handlers
    )
    events = list(stream)
    assert events[0].type == "agent.session.created"
    assert events[-1].type == "agent.session.idle"
    done = [e for e in events if e.type == "agent.session.turn.output_text.done"]
    assert [e.text for e in done] == ["Results: add: 2; lookup: EXAMPLE WORD."]
    client.close()


class _City(BaseModel):
    city: str
    rank: int


def test_openai_parses_structured_output(oracle: openai.OpenAI) -> None:
    sessions = oracle.beta.agents.sessions
    text: Any = {"format": {"type": "json_schema", "schema": _City.model_json_schema()}}
    session = sessions.create(environment={"type": "none"}, agent={"text": text}, input="hi")
    _wait_idle(oracle, session.id)
    with sessions.stream(session.id, input="where?", output_type=_City) as stream:
        result = stream.get_final_result()
    assert result.output_parsed == _City(city="example city", rank=1)
