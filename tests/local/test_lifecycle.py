"""Turns, events and required actions over real loopback HTTP."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from openagentcore.local import LocalCore, Scenario, TurnScript

from ._support import FUNCTION_TOOLS, Api, EventReader, message_event, result_event

TURN_START = [
    "agent.session.turn.created",
    "agent.session.turn.item.added",
    "agent.session.in_progress",
    "agent.session.turn.in_progress",
]
ANSWER = [
    "agent.session.turn.item.added",
    "agent.session.turn.content_part.added",
    "agent.session.turn.output_text.delta",
    "agent.session.turn.output_text.done",
    "agent.session.turn.content_part.done",
    "agent.session.turn.item.done",
    "agent.session.turn.completed",
    "agent.session.idle",
]


def _collapse_deltas(types: list[str]) -> list[str]:
    collapsed: list[str] = []
    for kind in types:
        if not (
            kind == "agent.session.turn.output_text.delta" and collapsed and collapsed[-1] == kind
        ):
            collapsed.append(kind)
    return collapsed


def test_turn_without_functions_settles_in_milliseconds(
    api: Api, open_stream: Callable[..., EventReader]
) -> None:
    session = api.create_session(input="ping")
    api.wait_status(session["id"], "idle")
    reader = open_stream(session["id"])
    started = time.monotonic()
    assert api.post_events(session["id"], [message_event("hello there")]).status_code == 202
    idle = reader.wait_for("agent.session.idle")
    assert time.monotonic() - started < 0.5
    assert _collapse_deltas(reader.types()) == TURN_START + ANSWER
    assert idle["session"]["status"] == "idle"
    completed = next(e for e in reader.events if e["type"] == "agent.session.turn.completed")
    assert completed["usage"] == completed["turn"]["usage"] is not None
    deltas = "".join(
        e["delta"] for e in reader.events if e["type"] == "agent.session.turn.output_text.delta"
    )
    done = next(e for e in reader.events if e["type"] == "agent.session.turn.output_text.done")
    assert deltas == done["text"] == "Done."
    assert len({e["event_id"] for e in reader.events}) == len(reader.events)


def test_function_calls_wait_for_results_and_feed_the_answer(
    api: Api, open_stream: Callable[..., EventReader]
) -> None:
    session = api.create_session(tools=FUNCTION_TOOLS, input="ping")
    api.run_turn_with_results(session["id"], lambda _: "first turn")
    reader = open_stream(session["id"])
    api.post_events(session["id"], [message_event("add and look up")])
    requires = reader.wait_for("agent.session.requires_action")
    actions = requires["session"]["required_actions"]
    assert [a["name"] for a in actions] == ["add", "lookup"]
    assert actions[0]["arguments"] == {"a": 1, "b": 1}
    assert actions[1]["arguments"] == {"word": "example word"}
    assert {a["turn_id"] for a in actions} == {
        requires["session"]["required_actions"][0]["turn_id"]
    }
    calls = [
        e
        for e in reader.events
        if e["type"] == "agent.session.turn.item.added" and e["output_index"] is not None
    ]
    assert [c["output_index"] for c in calls] == [0, 1]

    # A call stays required until its result is applied; the other one remains.
    api.post_events(session["id"], [result_event(actions[0], "2")])
    reader.wait_for("agent.session.turn.item.added")
    still = api.session(session["id"])
    assert still["status"] == "requires_action"
    assert [a["call_id"] for a in still["required_actions"]] == [actions[1]["call_id"]]

    api.post_events(session["id"], [result_event(actions[1], "a word")])
    reader.wait_for("agent.session.idle")
    final = api.items(session["id"])[-1]
    assert final["role"] == "assistant"
    assert final["content"][0]["text"] == "Results: add: 2; lookup: a word."
    turn_id = actions[0]["turn_id"]
    outputs = [
        i
        for i in api.items(session["id"])
        if i["type"] == "function_call_output" and i["turn_id"] == turn_id
    ]
    summary = [(o["output"], o["error"], o["status"]) for o in outputs]
    assert summary == [("2", None, "completed"), ("a word", None, "completed")]
    idle = api.session(session["id"])
    assert idle["required_actions"] == []
    assert idle["usage"] is not None


def test_failed_result_is_reported_and_keeps_field_presence(core: LocalCore, api: Api) -> None:
    session = api.create_session(tools=FUNCTION_TOOLS[:1])
    action = api.wait_status(session["id"], "requires_action")["required_actions"][0]
    failed = {k: v for k, v in result_event(action, "").items() if k != "output"}
    failed.update(success=False, error="boom")
    assert api.post_events(session["id"], [failed]).status_code == 202
    api.wait_status(session["id"], "idle")
    output = next(i for i in api.items(session["id"]) if i["type"] == "function_call_output")
    assert (output["output"], output["error"], output["status"]) == (None, "boom", "failed")
    assert "output" not in core.stored_results(session["id"])[action["call_id"]]
    assert api.items(session["id"])[-1]["content"][0]["text"] == "Results: add failed: boom."


def test_structured_output_answers_with_json_matching_the_schema(api: Api) -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "rank": {"type": "integer", "minimum": 3}},
        "required": ["city", "rank"],
    }
    session = api.create_session(
        agent={"text": {"format": {"type": "json_schema", "schema": schema}}}
    )
    api.wait_status(session["id"], "idle")
    answer = api.items(session["id"])[-1]["content"][0]["text"]
    assert json.loads(answer) == {"city": "example city", "rank": 3}


def test_structured_output_is_one_delta(api: Api, open_stream: Callable[..., EventReader]) -> None:
    fmt = {
        "type": "json_schema",
        "schema": {"type": "object", "properties": {"long": {"type": "string"}}},
    }
    session = api.create_session(agent={"text": {"format": fmt}})
    api.wait_status(session["id"], "idle")
    reader = open_stream(session["id"])
    api.post_events(session["id"], [message_event("again")])
    reader.wait_for("agent.session.idle")
    deltas = [e for e in reader.events if e["type"] == "agent.session.turn.output_text.delta"]
    assert len(deltas) == 1
    assert json.loads(deltas[0]["delta"]) == {"long": "example long"}


def test_messages_while_a_turn_waits_join_it(api: Api) -> None:
    session = api.create_session(tools=FUNCTION_TOOLS[:1])
    action = api.wait_status(session["id"], "requires_action")["required_actions"][0]
    assert api.post_events(session["id"], [message_event("also this")]).status_code == 202
    api.run_turn_with_results(session["id"], lambda _: "2")
    turns = api.http.get(f"/agents/sessions/{session['id']}/turns").json()["data"]
    assert len(turns) == 1
    users = [i for i in api.items(session["id"]) if i.get("role") == "user"]
    assert [u["turn_id"] for u in users] == [action["turn_id"]] * 2


def test_cancel_stops_a_waiting_turn_and_later_results_conflict(
    api: Api, open_stream: Callable[..., EventReader]
) -> None:
    session = api.create_session(tools=FUNCTION_TOOLS[:1])
    action = api.wait_status(session["id"], "requires_action")["required_actions"][0]
    reader = open_stream(session["id"])
    assert (
        api.post_events(session["id"], [{"type": "agent.session.input.cancel"}]).status_code == 202
    )
    cancelled = reader.wait_for("agent.session.turn.cancelled")
    assert cancelled["turn"]["status"] == "cancelled"
    assert "usage" in cancelled
    idle = reader.wait_for("agent.session.idle")
    assert idle["session"]["required_actions"] == []
    late = api.post_events(session["id"], [result_event(action, "2")])
    assert late.status_code == 409
    assert (
        late.json()["error"]["message"] == "The Turn cannot accept this input in its current state."
    )
    # New input starts a new Turn on the same Session.
    api.post_events(session["id"], [message_event("again")])
    assert (
        api.wait_status(session["id"], "requires_action")["required_actions"][0]["turn_id"]
        != action["turn_id"]
    )


def test_result_and_cancel_in_one_batch_store_the_result_without_an_item(
    core: LocalCore, api: Api
) -> None:
    session = api.create_session(tools=FUNCTION_TOOLS[:1])
    action = api.wait_status(session["id"], "requires_action")["required_actions"][0]
    batch = [result_event(action, "2"), {"type": "agent.session.input.cancel"}]
    assert api.post_events(session["id"], batch).status_code == 202
    api.wait_status(session["id"], "idle")
    assert core.stored_results(session["id"])[action["call_id"]]["output"] == "2"
    assert not [i for i in api.items(session["id"]) if i["type"] == "function_call_output"]
    # The identical result is still accepted after the Turn ended.
    assert api.post_events(session["id"], [result_event(action, "2")]).status_code == 202


def test_cancel_on_an_idle_session_has_no_effect(api: Api) -> None:
    session = api.create_session()
    api.wait_status(session["id"], "idle")
    assert (
        api.post_events(session["id"], [{"type": "agent.session.input.cancel"}]).status_code == 202
    )
    turns = api.http.get(f"/agents/sessions/{session['id']}/turns").json()["data"]
    assert [t["status"] for t in turns] == ["completed"]


def test_creation_stream_sends_the_whole_creation_and_ends_at_idle(api: Api) -> None:
    body = {"environment": {"type": "none"}, "input": "hi", "stream": True}
    request = api.http.build_request("POST", "/agents/sessions", json=body)
    reader = EventReader(api, response=api.http.send(request, stream=True))
    reader.wait_closed()
    types = _collapse_deltas(reader.types())
    assert types == ["agent.session.created", *TURN_START, *ANSWER]
    assert reader.events[0]["session"]["status"] == "in_progress"
    assert reader.response.status_code == 201
    reader.close()


def test_creation_retry_returns_the_original_session(fresh_api: Api) -> None:
    api = fresh_api
    body = {"environment": {"type": "none"}, "input": "hi"}
    first = api.http.post("/agents/sessions", json=body, headers={"Idempotency-Key": "k1"})
    again = api.http.post("/agents/sessions", json=body, headers={"Idempotency-Key": "k1"})
    assert first.status_code == again.status_code == 201
    assert first.json()["id"] == again.json()["id"]
    assert len(api.http.get("/agents/sessions").json()["data"]) == 1
    other = api.http.post(
        "/agents/sessions", json={**body, "input": "other"}, headers={"Idempotency-Key": "k1"}
    )
    assert other.status_code == 409
    assert other.json()["error"]["code"] == "idempotency_conflict"
    streamed = api.http.post(
        "/agents/sessions", json={**body, "stream": True}, headers={"Idempotency-Key": "k2"}
    )
    retry = api.http.post(
        "/agents/sessions", json={**body, "stream": True}, headers={"Idempotency-Key": "k2"}
    )
    assert "agent.session.created" in streamed.text
    assert retry.status_code == 201
    assert "data:" not in retry.text


def test_delete_requires_a_settled_session_and_ends_streams(
    api: Api, open_stream: Callable[..., EventReader]
) -> None:
    session = api.create_session(tools=FUNCTION_TOOLS[:1])
    api.wait_status(session["id"], "requires_action")
    busy = api.http.delete(f"/agents/sessions/{session['id']}")
    assert busy.status_code == 409
    assert busy.json()["error"]["type"] == "conflict_error"
    reader = open_stream(session["id"])
    api.post_events(session["id"], [{"type": "agent.session.input.cancel"}])
    api.wait_status(session["id"], "idle")
    deleted = api.http.delete(f"/agents/sessions/{session['id']}")
    assert deleted.json() == {
        "id": session["id"],
        "object": "agent.session.deleted",
        "deleted": True,
    }
    reader.wait_closed()
    assert api.http.get(f"/agents/sessions/{session['id']}").status_code == 404
    assert api.http.delete(f"/agents/sessions/{session['id']}").status_code == 200
    assert api.post_events(session["id"], [message_event("x")]).status_code == 404


def test_agents_crud_and_sessions_from_a_saved_agent(api: Api) -> None:
    created = api.http.post(
        "/agents", json={"model": "m1", "name": "helper", "tools": FUNCTION_TOOLS[:1]}
    )
    assert created.status_code == 201
    agent = created.json()
    assert agent["text"] == {"format": {"type": "text"}, "verbosity": "medium"}
    assert agent["tools"][0]["defer_loading"] is False
    assert agent["service_tier"] == "auto"
    updated = api.http.post(f"/agents/{agent['id']}", json={"instructions": "be brief"}).json()
    assert updated["instructions"] == "be brief"
    assert updated["name"] == "helper"
    session = api.create_session(agent_id=agent["id"], metadata={"k": "v"})
    assert session["agent"]["id"] == agent["id"]
    assert session["agent"]["tools"][0]["name"] == "add"
    assert session["metadata"] == {"k": "v"}
    listed = api.http.get("/agents/sessions", params={"agent_id": agent["id"]}).json()
    assert [s["id"] for s in listed["data"]] == [session["id"]]
    assert api.http.get("/agents/sessions", params={"agent_id": "agent_other"}).json()["data"] == []
    patched = api.http.post(f"/agents/sessions/{session['id']}", json={"metadata": None})
    assert patched.json()["metadata"] == {}
    assert api.http.delete(f"/agents/{agent['id']}").json()["deleted"] is True
    assert api.http.get(f"/agents/{agent['id']}").status_code == 404
    missing = api.http.post(
        "/agents/sessions",
        json={"environment": {"type": "none"}, "agent_id": agent["id"], "input": "x"},
    )
    assert missing.status_code == 404


def test_admission_errors_map_to_400(fresh_api: Api) -> None:
    api = fresh_api
    tools: list[dict[str, Any]] = [FUNCTION_TOOLS[0], FUNCTION_TOOLS[0]]
    response = api.http.post(
        "/agents/sessions",
        json={"environment": {"type": "none"}, "input": "x", "agent": {"tools": tools}},
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("invalid_request_error", None)
    assert error["message"] == "duplicate function tool name: add"
    web = [{"type": "web_search"}]
    response = api.http.post(
        "/agents/sessions",
        json={"environment": {"type": "none"}, "input": "x", "agent": {"tools": web}},
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "unsupported_or_invalid_configuration"
    assert api.http.get("/agents/sessions").json()["data"] == []


def test_a_scripted_failure_fails_the_turn_but_not_the_session(
    make_core: Callable[..., LocalCore],
) -> None:
    api = Api(make_core(scenario=Scenario(turns=[TurnScript(), TurnScript(fail=True)])))
    session = api.create_session()
    api.wait_status(session["id"], "idle")
    reader = EventReader(api, session["id"])
    api.post_events(session["id"], [message_event("this one fails")])
    failed = reader.wait_for("agent.session.failed")
    assert failed["session"]["status"] == "failed"
    assert failed["session"]["error"] == "The execution could not complete."
    turn_failed = next(e for e in reader.events if e["type"] == "agent.session.turn.failed")
    assert turn_failed["turn"]["error"] == {
        "code": "internal_error",
        "message": "The execution could not complete.",
    }
    # The stream stays open and new input starts a new Turn.
    api.post_events(session["id"], [message_event("recover")])
    assert reader.wait_for("agent.session.idle")["session"]["status"] == "idle"
    reader.close()
    deleted = api.http.delete(f"/agents/sessions/{session['id']}")
    assert deleted.status_code == 200
    api.close()


def test_saved_agents_keep_tools_sessions_cannot_run(api: Api) -> None:
    duplicate = api.http.post("/agents", json={"model": "m", "tools": [FUNCTION_TOOLS[0]] * 2})
    assert duplicate.status_code == 400
    assert duplicate.json()["error"]["code"] == "invalid_request_error"
    saved = api.http.post("/agents", json={"model": "m", "tools": [{"type": "web_search"}]})
    assert saved.status_code == 201
    assert saved.json()["tools"][0]["mode"] == "live"
    body = {"environment": {"type": "none"}, "input": "x", "agent_id": saved.json()["id"]}
    rejected = api.http.post("/agents/sessions", json=body)
    assert rejected.status_code == 400
    assert rejected.json()["error"]["code"] == "unsupported_or_invalid_configuration"
    # A per-Session tools replacement admits it.
    replaced = api.http.post("/agents/sessions", json={**body, "agent": {"tools": []}})
    assert replaced.status_code == 201
