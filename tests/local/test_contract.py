"""The contract's tables, row by row: headers, input errors, results, retries, limits, lists."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from openagentcore.local import LocalCore

from ._support import FUNCTION_TOOLS, Api, message_event, result_event

CANCEL = {"type": "agent.session.input.cancel"}


def _error(response: httpx.Response) -> dict[str, Any]:
    body: dict[str, Any] = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"type", "code", "message", "param"}
    error: dict[str, Any] = body["error"]
    return error


def _waiting(api: Api, tools: list[dict[str, Any]] | None = None) -> tuple[str, dict[str, Any]]:
    session = api.create_session(tools=tools or FUNCTION_TOOLS[:1])
    action = api.wait_status(session["id"], "requires_action")["required_actions"][0]
    return session["id"], action


# -- headers -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "status", "code", "type_"),
    [
        ({}, 400, "invalid_beta", "invalid_beta"),
        ({"OpenAI-Beta": "agents=v0"}, 400, "invalid_beta", "invalid_beta"),
        ({"OpenAI-Beta": "agents=v1"}, 401, None, "invalid_request_error"),
        (
            {"OpenAI-Beta": "agents=v1", "Authorization": "Basic abc"},
            401,
            None,
            "invalid_request_error",
        ),
        (
            {"OpenAI-Beta": "agents=v1", "Authorization": "Bearer wrong"},
            401,
            None,
            "invalid_request_error",
        ),
        (
            {"OpenAI-Beta": "agents=v1", "Authorization": "Bearer wr\u00f6ng"},
            401,
            None,
            "invalid_request_error",
        ),
    ],
)
def test_beta_header_then_bearer_key(
    core: LocalCore, headers: dict[str, str], status: int, code: str | None, type_: str
) -> None:
    encoded = httpx.Headers(headers, encoding="utf-8")
    response = httpx.get(f"{core.base_url}/agents/sessions", headers=encoded)
    assert response.status_code == status
    error = _error(response)
    assert (error["code"], error["type"]) == (code, type_)
    if status == 401:
        assert response.headers["WWW-Authenticate"] == "Bearer"
        assert error["message"] == "A valid Agents API bearer key is required."
    assert core.api_key not in response.text


def test_repeated_beta_header_is_rejected(core: LocalCore) -> None:
    headers = [
        ("OpenAI-Beta", "agents=v1"),
        ("OpenAI-Beta", "agents=v1"),
        ("Authorization", f"Bearer {core.api_key}"),
    ]
    response = httpx.get(f"{core.base_url}/agents/sessions", headers=headers)
    assert response.status_code == 400
    assert _error(response)["code"] == "invalid_beta"


def test_every_response_has_a_fresh_request_id(api: Api) -> None:
    first = api.http.get("/agents/sessions")
    second = api.http.get("/agents/sessions/sess_missing")
    ids = {first.headers["X-Request-Id"], second.headers["X-Request-Id"]}
    assert len(ids) == 2
    assert all(re.fullmatch(r"req_[0-9a-f]{32}", i) for i in ids)
    assert first.headers["OpenAI-Version"] == "2020-10-01"
    assert first.headers["Cache-Control"] == "no-store"


def test_unknown_route_and_method(api: Api) -> None:
    unknown = api.http.get("/agents/nothing/here")
    assert unknown.status_code == 404
    assert _error(unknown)["code"] == "unsupported_operation"
    head = api.http.head("/agents/sessions/sess_x/events")
    assert head.status_code == 405


# -- input errors (sessions-events.md) and the result table (execution-tools.md) ------------


def test_unknown_call_is_400(api: Api) -> None:
    session_id, action = _waiting(api)
    response = api.post_events(session_id, [result_event({**action, "call_id": "call_nope"}, "x")])
    assert response.status_code == 400
    assert _error(response) == {
        "type": "invalid_request_error",
        "code": "invalid_request_error",
        "message": "Unknown pending tool call.",
        "param": None,
    }
    assert api.session(session_id)["required_actions"] == [action]


@pytest.mark.parametrize("turn_id", ["turn_other", "not a turn id"])
def test_call_of_another_turn_is_400(api: Api, turn_id: str) -> None:
    session_id, action = _waiting(api)
    response = api.post_events(session_id, [result_event({**action, "turn_id": turn_id}, "x")])
    assert response.status_code == 400
    assert _error(response)["message"] == "The tool call belongs to a different Turn."
    assert api.session(session_id)["required_actions"] == [action]


def test_call_of_another_session_is_unknown(api: Api) -> None:
    _, action = _waiting(api)
    other_id, _ = _waiting(api)
    response = api.post_events(other_id, [result_event(action, "x")])
    assert response.status_code == 400
    assert _error(response)["message"] == "Unknown pending tool call."


def test_identical_retry_is_accepted_before_and_after_the_turn_ends(
    core: LocalCore, api: Api
) -> None:
    session_id, action = _waiting(api)
    result = result_event(action, "2")
    assert api.post_events(session_id, [result]).status_code == 202
    assert api.post_events(session_id, [result]).status_code == 202
    api.wait_status(session_id, "idle")
    assert api.post_events(session_id, [result]).status_code == 202
    outputs = [i for i in api.items(session_id) if i["type"] == "function_call_output"]
    assert len(outputs) == 1


@pytest.mark.parametrize(
    "change",
    [{"output": "3"}, {"success": False}, {"error": None}, {"output": None}],
    ids=["other-output", "other-success", "error-present", "output-null"],
)
def test_a_different_result_conflicts_before_and_after_the_turn_ends(
    api: Api, change: dict[str, Any]
) -> None:
    session_id, _action = _waiting(api, FUNCTION_TOOLS)
    actions = api.session(session_id)["required_actions"]
    first = result_event(actions[0], "2")
    assert api.post_events(session_id, [first]).status_code == 202
    response = api.post_events(session_id, [{**first, **change}])
    assert response.status_code == 409
    assert _error(response) == {
        "type": "conflict_error",
        "code": "conflict_error",
        "message": "The tool call already has a different result.",
        "param": None,
    }
    api.post_events(session_id, [result_event(actions[1], "w")])
    api.wait_status(session_id, "idle")
    assert api.post_events(session_id, [{**first, **change}]).status_code == 409


def test_two_different_results_in_one_batch_reject_the_whole_batch(
    core: LocalCore, api: Api
) -> None:
    session_id, action = _waiting(api)
    batch = [message_event("steer"), result_event(action, "2"), result_event(action, "3")]
    assert api.post_events(session_id, batch).status_code == 409
    assert core.stored_results(session_id) == {}
    assert len([i for i in api.items(session_id) if i.get("role") == "user"]) == 1


def test_first_result_after_cancellation_conflicts(api: Api) -> None:
    session_id, action = _waiting(api)
    response = api.post_events(session_id, [CANCEL, result_event(action, "2")])
    assert response.status_code == 409
    assert _error(response)["message"] == "The Turn cannot accept this input in its current state."


def test_missing_session_is_404(api: Api) -> None:
    response = api.post_events("sess_missing", [message_event("x")])
    assert response.status_code == 404
    assert _error(response) == {
        "type": "not_found_error",
        "code": "not_found_error",
        "message": "Resource not found.",
        "param": None,
    }


@pytest.mark.parametrize(
    ("event", "code"),
    [
        ({"turn_id": ""}, "invalid_request"),
        ({"call_id": "  "}, "invalid_request"),
        ({"success": "yes"}, "invalid_request"),
        ({"output": 5}, "invalid_request"),
        ({"extra": 1}, "invalid_request_error"),
    ],
)
def test_malformed_results_are_400_before_the_session_lookup(
    api: Api, event: dict[str, Any], code: str
) -> None:
    base = {
        "type": "agent.session.input.tool_result",
        "turn_id": "turn_x",
        "call_id": "call_x",
        "success": True,
    }
    response = api.post_events("sess_missing", [{**base, **event}])
    assert response.status_code == 400
    assert _error(response)["code"] == code


@pytest.mark.parametrize("field", ["turn_id", "call_id", "success"])
def test_required_result_fields(api: Api, field: str) -> None:
    event = {
        "type": "agent.session.input.tool_result",
        "turn_id": "t",
        "call_id": "c",
        "success": True,
    }
    del event[field]
    response = api.post_events("sess_missing", [event])
    assert response.status_code == 400
    assert _error(response)["param"] == f"events[0].{field}"


@pytest.mark.parametrize(
    "message",
    [
        {"role": "user", "content": []},
        {"role": "user", "content": [{"type": "input_text", "text": ""}]},
        {"role": "user", "type": None, "content": [{"type": "input_text", "text": "x"}]},
        {"role": "assistant", "content": [{"type": "input_text", "text": "x"}]},
        {"role": "user", "content": "x"},
    ],
)
def test_invalid_messages_write_nothing(api: Api, message: dict[str, Any]) -> None:
    session = api.create_session()
    api.wait_status(session["id"], "idle")
    response = api.post_events(
        session["id"], [{"type": "agent.session.input.message", "input": [message]}]
    )
    assert response.status_code == 400
    assert len(api.http.get(f"/agents/sessions/{session['id']}/turns").json()["data"]) == 1


def test_empty_text_beside_other_content_is_stored_as_sent(api: Api) -> None:
    session = api.create_session()
    content = [{"type": "input_text", "text": ""}, {"type": "input_text", "text": "  hi"}]
    api.wait_status(session["id"], "idle")
    event = {"type": "agent.session.input.message", "input": [{"role": "user", "content": content}]}
    assert api.post_events(session["id"], [event]).status_code == 202
    api.wait_status(session["id"], "idle")
    users = [i for i in api.items(session["id"]) if i.get("role") == "user"]
    assert users[-1]["content"] == content


# -- batches, limits and idempotency --------------------------------------------------------


def test_empty_batch_checks_the_session_and_admits_nothing(api: Api) -> None:
    session = api.create_session()
    api.wait_status(session["id"], "idle")
    assert api.post_events(session["id"], [], key="k").status_code == 202
    assert api.post_events("sess_missing", []).status_code == 404
    # The empty batch created no retry identity: the key is still free.
    assert api.post_events(session["id"], [message_event("x")], key="k").status_code == 202


@pytest.mark.parametrize(("count", "status"), [(64, 202), (65, 400)])
def test_batch_size_limit(api: Api, count: int, status: int) -> None:
    session = api.create_session()
    api.wait_status(session["id"], "idle")
    response = api.post_events(session["id"], [message_event(f"m{i}") for i in range(count)])
    assert response.status_code == status


def test_null_events_are_invalid(api: Api) -> None:
    session = api.create_session()
    response = api.http.post(f"/agents/sessions/{session['id']}/events", json={"events": None})
    assert response.status_code == 400
    assert _error(response)["param"] == "events"


def test_body_limits(api: Api) -> None:
    session = api.create_session()
    api.wait_status(session["id"], "idle")
    too_big = api.post_events(session["id"], [message_event("x" * (1024 * 1024))])
    assert too_big.status_code == 413
    assert _error(too_big)["code"] == "request_too_large"
    stored = api.post_events(
        session["id"], [message_event("x" * 300 * 1024), message_event("y" * 300 * 1024)]
    )
    assert stored.status_code == 400
    assert len(api.http.get(f"/agents/sessions/{session['id']}/turns").json()["data"]) == 1


@pytest.mark.parametrize(
    ("body", "content_type", "fragment"),
    [
        (b"{}", "text/plain", "Content-Type"),
        (b"{", "application/json", "failed to parse JSON"),
        (b'{"events": [], "events": []}', "application/json", "duplicate JSON key"),
        (b"[]", "application/json", "expected an object"),
        (b"\xff", "application/json", "unicode"),
    ],
)
def test_body_gate(api: Api, body: bytes, content_type: str, fragment: str) -> None:
    session = api.create_session()
    response = api.http.post(
        f"/agents/sessions/{session['id']}/events",
        content=body,
        headers={"Content-Type": content_type},
    )
    assert response.status_code == 400
    assert fragment in _error(response)["message"]


def test_idempotency_key_replays_and_conflicts(api: Api) -> None:
    session = api.create_session()
    api.wait_status(session["id"], "idle")
    batch = [message_event("once")]
    assert api.post_events(session["id"], batch, key="key-1").status_code == 202
    assert api.post_events(session["id"], batch, key="key-1").status_code == 202
    api.wait_status(session["id"], "idle")
    assert len(api.http.get(f"/agents/sessions/{session['id']}/turns").json()["data"]) == 2
    conflict = api.post_events(session["id"], [message_event("other")], key="key-1")
    assert conflict.status_code == 409
    assert _error(conflict) == {
        "type": "conflict_error",
        "code": "idempotency_conflict",
        "message": "This idempotency key was used with different input.",
        "param": None,
    }
    # Without a key every request is new.
    assert api.post_events(session["id"], batch).status_code == 202


@pytest.mark.parametrize(("key", "status"), [("k" * 128, 202), ("k" * 129, 400)])
def test_idempotency_key_length(api: Api, key: str, status: int) -> None:
    session = api.create_session()
    api.wait_status(session["id"], "idle")
    assert api.post_events(session["id"], [message_event("x")], key=key).status_code == status


def test_rejected_batch_keeps_its_key_free(api: Api) -> None:
    session_id, action = _waiting(api)
    bad = [result_event({**action, "call_id": "call_nope"}, "x")]
    assert api.post_events(session_id, bad, key="retry").status_code == 400
    assert api.post_events(session_id, [result_event(action, "2")], key="retry").status_code == 202


# -- lists ------------------------------------------------------------------------------------


def _turns(api: Api, count: int) -> str:
    session = api.create_session()
    for index in range(count - 1):
        api.wait_status(session["id"], "idle")
        api.post_events(session["id"], [message_event(f"turn {index}")])
    api.wait_status(session["id"], "idle")
    return str(session["id"])


def test_list_pages_with_cursors_both_ways(api: Api) -> None:
    session_id = _turns(api, 3)
    path = f"/agents/sessions/{session_id}/turns"
    desc = api.http.get(path).json()
    assert desc["object"] == "list"
    assert desc["has_more"] is False
    ids = [t["id"] for t in desc["data"]]
    assert (desc["first_id"], desc["last_id"]) == (ids[0], ids[-1])
    asc = api.http.get(path, params={"order": "asc"}).json()
    assert [t["id"] for t in asc["data"]] == ids[::-1]
    page = api.http.get(path, params={"order": "asc", "limit": 2}).json()
    assert page["has_more"] is True
    assert [t["id"] for t in page["data"]] == ids[::-1][:2]
    rest = api.http.get(path, params={"order": "asc", "limit": 2, "after": page["last_id"]}).json()
    assert [t["id"] for t in rest["data"]] == [ids[0]]
    assert rest["has_more"] is False
    empty = api.http.get(path, params={"after": ids[-1]}).json()
    assert empty == {
        "object": "list",
        "data": [],
        "has_more": False,
        "first_id": None,
        "last_id": None,
    }


@pytest.mark.parametrize(
    ("route", "limit", "status"),
    [
        ("turns", "0", 400),
        ("turns", "101", 400),
        ("turns", "100", 200),
        ("items", "0", 200),
        ("items", "101", 200),
        ("items", "abc", 400),
        ("items", "-1", 400),
    ],
)
def test_page_size_rules(api: Api, route: str, limit: str, status: int) -> None:
    session = api.create_session()
    response = api.http.get(f"/agents/sessions/{session['id']}/{route}", params={"limit": limit})
    assert response.status_code == status


def test_item_limit_zero_becomes_one(api: Api) -> None:
    session = api.create_session()
    api.wait_status(session["id"], "idle")
    page = api.http.get(f"/agents/sessions/{session['id']}/items", params={"limit": 0}).json()
    assert len(page["data"]) == 1
    assert page["has_more"] is True


@pytest.mark.parametrize(
    ("route", "status", "message"),
    [
        ("/agents/sessions/{sid}/turns", 404, "Resource not found."),
        ("/agents/sessions/{sid}/items", 400, "Invalid session item ID in `after`"),
        ("/agents/sessions", 404, "Resource not found."),
        ("/agents", 404, "Resource not found."),
    ],
)
def test_unresolved_cursor(api: Api, route: str, status: int, message: str) -> None:
    session = api.create_session()
    response = api.http.get(route.format(sid=session["id"]), params={"after": "nope"})
    assert response.status_code == status
    assert _error(response)["message"] == message


def test_order_and_repeated_keys(api: Api) -> None:
    bad_order = api.http.get("/agents/sessions", params={"order": ""})
    assert bad_order.status_code == 400
    assert "unknown variant ``" in _error(bad_order)["message"]
    repeated = api.http.get("/agents/sessions?limit=1&limit=2")
    assert repeated.status_code == 400
    assert (
        _error(repeated)["message"] == "Failed to deserialize query string: duplicate field `limit`"
    )
    assert api.http.get("/agents/sessions", params={"unknown": "x"}).status_code == 200
