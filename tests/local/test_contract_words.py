"""The contract's exact words: body parsing, precedence, unknown members, admission
messages and the smaller rules (items 3, 5, 6, 7 and 8 of issue 14)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, get_type_hints

import httpx
import pytest
from openai.types.beta import Agent

from openagentcore.local import Faults, LocalCore
from openagentcore.resources.sessions import SessionCreateParams, SessionUpdateParams

from ._support import Api, message_event, parse_strict

PARSE_ERROR = (
    "Invalid body: failed to parse JSON value. Please check the value to ensure it is "
    "valid JSON. (Common errors include trailing commas, missing closing brackets, "
    "missing quotation marks, etc.)"
)


def _error(response: httpx.Response, status: int = 400) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    return error


def _post_raw(api: Api, route: str, raw: bytes) -> httpx.Response:
    return api.http.post(route, content=raw, headers={"Content-Type": "application/json"})


def _function(name: str, **parameters: Any) -> dict[str, Any]:
    schema = {"type": "object", "properties": {}, **parameters}
    return {"type": "function", "name": name, "description": "d", "parameters": schema}


def _create_session(api: Api, **agent: Any) -> httpx.Response:
    return api.http.post(
        "/agents/sessions",
        json={"environment": {"type": "none"}, "input": "x", "agent": agent},
    )


# -- item 3: bad JSON -------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        b'{"model": "m", "tools": [{"type": "function", "name": "f", "description": "d",'
        b' "parameters": {"type": "object", "maximum": NaN}}]}',
        b'{"model": "m", "name": Infinity}',
        b'{"model": "m", "name": -Infinity}',
        b'{"model": "m", "name": "\\ud800"}',
        b'{"model": "m", "metadata": {"\\udfff": "v"}}',
    ],
    ids=["nan", "infinity", "minus-infinity", "lone-high-surrogate", "lone-low-surrogate-key"],
)
def test_non_json_numbers_and_lone_surrogates_are_parse_errors(fresh_api: Api, raw: bytes) -> None:
    """wire-semantics.md, "Request bodies" (order 4): malformed JSON, including an
    escape that forms a lone UTF-16 surrogate, is a 400 parse error with a null param,
    and nothing is written."""
    api = fresh_api
    error = _error(_post_raw(api, "/agents", raw))

    assert error == {
        "type": "invalid_request_error",
        "code": "invalid_request_error",
        "message": PARSE_ERROR,
        "param": None,
    }
    listed = api.http.get("/agents")
    assert listed.status_code == 200, listed.text
    assert listed.json()["data"] == []


def test_a_surrogate_pair_is_one_character_and_accepted(fresh_api: Api) -> None:
    response = _post_raw(fresh_api, "/agents", b'{"model": "m", "name": "\\ud83d\\ude00"}')
    assert response.status_code == 201, response.text
    assert response.json()["name"] == "\N{GRINNING FACE}"


def test_bad_json_in_input_events_admits_nothing(api: Api) -> None:
    session = api.create_session()
    api.wait_status(session["id"], "idle")
    raw = (
        b'{"events": [{"type": "agent.session.input.message", "input": [{"role": "user",'
        b' "content": [{"type": "input_text", "text": "\\udc00"}]}]}]}'
    )
    error = _error(_post_raw(api, f"/agents/sessions/{session['id']}/events", raw))
    assert error["message"] == PARSE_ERROR
    turns = api.http.get(f"/agents/sessions/{session['id']}/turns").json()["data"]
    assert len(turns) == 1


@pytest.mark.parametrize(
    ("raw", "key", "path"),
    [
        (b'{"metadata": {"k": "a", "k": "b"}}', "k", "metadata.k"),
        (b'{"model": "m", "model": "n"}', "model", "model"),
        (b'{"tools": [{"type": "function", "type": "x"}], "model": "m"}', "type", "tools.type"),
        (b'{"a": {"x": 1, "x": 2}, "a": 3}', "x", "a.x"),
        (b'{"a": 1, "a": {"x": 1, "x": 2}}', "a", "a"),
    ],
)
def test_duplicate_keys_name_their_path(api: Api, raw: bytes, key: str, path: str) -> None:
    """wire-semantics.md, "Request bodies" (order 5): the first repeated key in
    document order is named with its path, keys joined with dots, array indices left
    out."""
    error = _error(_post_raw(api, "/agents", raw))
    assert error["message"] == (
        f"Invalid body: duplicate JSON key '{key}' at '{path}'. "
        "Duplicate JSON keys are not supported."
    )
    assert error["param"] is None


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "m", "name": "a\u0000b"}, None),
        ({"model": "m", "metadata": {"k": "v\u0000"}}, "metadata.k"),
    ],
)
def test_u0000_in_stored_text_is_refused(
    fresh_api: Api, body: dict[str, Any], param: str | None
) -> None:
    """wire-semantics.md, "Validation errors": U+0000 in a stored string is refused,
    with the metadata key as param or a null param, and nothing is written."""
    error = _error(fresh_api.http.post("/agents", json=body))
    assert error["param"] == param
    assert "U+0000" in error["message"]
    assert fresh_api.http.get("/agents").json()["data"] == []


def test_u0000_in_message_text_is_refused(api: Api) -> None:
    session = api.create_session()
    api.wait_status(session["id"], "idle")
    response = api.post_events(session["id"], [message_event("a\u0000b")])
    assert _error(response)["param"] is None
    turns = api.http.get(f"/agents/sessions/{session['id']}/turns").json()["data"]
    assert len(turns) == 1


# -- item 5: precedence -----------------------------------------------------------------


def test_invalid_inline_agent_wins_over_an_unknown_agent_id(api: Api) -> None:
    """wire-semantics.md, "Configuration validation": the inline Session agent is
    validated before the Agent lookup, so a missing Agent ID gives the same 400."""
    response = api.http.post(
        "/agents/sessions",
        json={
            "environment": {"type": "none"},
            "input": "x",
            "agent_id": "agent_missing",
            "agent": {"tools": [{"type": "function", "name": "f"}]},
        },
    )
    error = _error(response)
    assert error["code"] == "invalid_request_error"
    assert error["param"] == "agent.tools[0].description"
    assert error["message"] == "Missing required parameter: 'agent.tools[0].description'."


@pytest.mark.parametrize("agent", [[], "x", 1])
def test_an_inline_agent_must_be_an_object(api: Api, agent: object) -> None:
    body = {"environment": {"type": "none"}, "input": "x", "agent": agent}
    error = _error(api.http.post("/agents/sessions", json=body))
    assert error["param"] == "agent"
    assert error["message"].startswith("Invalid type for 'agent': expected an object")


def test_invalid_inline_agent_wins_over_missing_input(api: Api) -> None:
    """official-semantics-alignment.md, row C4: without input and with an invalid
    inline agent, the configuration error comes first."""
    response = api.http.post(
        "/agents/sessions",
        json={"environment": {"type": "none"}, "agent": {"tools": [{"type": "nope"}]}},
    )
    assert _error(response)["param"] == "agent.tools[0].type"


# -- item 6: unknown members ----------------------------------------------------------


@pytest.mark.parametrize(
    ("member", "value"),
    [
        ("review", "none"),
        ("spend_control", None),
        ("prompt_cache_options", {}),
        ("stream_options", {"include_usage": True}),
    ],
)
def test_unknown_session_members_are_rejected(fresh_api: Api, member: str, value: Any) -> None:
    """wire-semantics.md, "Request bodies": a member the route does not define is an
    unknown parameter, rejected before any write."""
    body = {"environment": {"type": "none"}, "input": "x", member: value}
    error = _error(fresh_api.http.post("/agents/sessions", json=body))
    assert (error["message"], error["param"]) == (f"Unknown parameter: '{member}'.", member)
    assert fresh_api.http.get("/agents/sessions").json()["data"] == []


def test_session_update_accepts_only_metadata(api: Api) -> None:
    """wire-semantics.md, "Update and list": a Session update takes only metadata."""
    session = api.create_session()
    response = api.http.post(f"/agents/sessions/{session['id']}", json={"agent": {"tools": []}})
    assert _error(response)["param"] == "agent"


def test_sdk_session_params_follow_openapi() -> None:
    """openapi.yaml, v1.CreateSessionRequest and v1.UpdateSessionRequest: the members
    the SDK offers (``stream`` is the create method's own argument)."""
    assert set(get_type_hints(SessionCreateParams)) == {
        "agent",
        "agent_id",
        "environment",
        "input",
        "metadata",
        "vault_ids",
        "x_agents_core",
    }
    assert set(get_type_hints(SessionUpdateParams)) == {"metadata"}
    assert SessionUpdateParams.__required_keys__ == frozenset({"metadata"})


def test_sdk_session_x_agents_core_reaches_the_server(core: LocalCore) -> None:
    from openagentcore import Client

    with Client(base_url=core.base_url, api_key=core.api_key) as client:
        session = client.sessions.create(input="x", x_agents_core={"sandbox_node_id": "n"})
    assert session.id


# -- item 7: exact words --------------------------------------------------------------


DUPLICATE = [_function("f"), _function("f")]
SIXTY_FIVE = [_function(f"f{index}") for index in range(65)]


@pytest.mark.parametrize(
    ("agent", "code", "message"),
    [
        ({"tools": DUPLICATE}, "invalid_request_error", "duplicate function tool name: f"),
        (
            {"tools": [{"type": "web_search", "mode": "disabled"}] * 2},
            "invalid_request_error",
            "duplicate web_search tool",
        ),
        (
            {"tools": [{"type": "tool_search"}] * 2},
            "invalid_request_error",
            "duplicate tool_search tool",
        ),
        (
            {"tools": [_function("f", type="array")]},
            "invalid_request_error",
            "Invalid schema for function 'f': schema must be a JSON Schema of "
            "'type: \"object\"', got 'type: \"array\"'.",
        ),
        (
            {"text": {"format": {"type": "json_schema", "schema": {"type": "string"}}}},
            "invalid_request_error",
            'agent.text.format.schema must have top-level type "object"; got "string"',
        ),
        (
            {"tools": SIXTY_FIVE},
            "unsupported_or_invalid_configuration",
            "This service supports at most 64 function tools.",
        ),
        (
            {"tools": [_function("x" * 513)]},
            "unsupported_or_invalid_configuration",
            "Function names must be nonempty, unique and at most 512 bytes.",
        ),
        (
            {"tools": [{"type": "programmatic_tool_calling", "enabled": False}] * 2},
            "unsupported_or_invalid_configuration",
            "Execution requires distinct tool controls.",
        ),
        (
            {"tools": [{"type": "web_search"}]},
            "unsupported_or_invalid_configuration",
            "Only disabled web_search is qualified for execution.",
        ),
    ],
    ids=[
        "duplicate-name",
        "duplicate-web-search",
        "duplicate-tool-search",
        "function-schema-root",
        "text-format-schema-root",
        "65-functions",
        "name-length",
        "distinct-controls",
        "web-search-mode",
    ],
)
def test_admission_errors_use_the_servers_words(
    api: Api, agent: dict[str, Any], code: str, message: str
) -> None:
    """wire-semantics.md, "Configuration validation" and "Session admission" (and
    official-semantics-alignment.md rows C2, C3, K3): these answers carry the
    contract's messages and a null param."""
    error = _error(_create_session(api, **agent))
    assert (error["code"], error["message"], error["param"]) == (code, message, None)


@pytest.mark.parametrize(
    ("tools", "message", "param"),
    [
        (
            [{"type": "function", "name": "f", "description": "d"}],
            "Missing required parameter: 'agent.tools[0].parameters'.",
            "agent.tools[0].parameters",
        ),
        (
            [{**_function("f"), "strict": True}],
            "Unknown parameter: 'agent.tools[0].strict'.",
            "agent.tools[0].strict",
        ),
        (
            [{**_function("f"), "defer_loading": "yes"}],
            "Invalid type for 'agent.tools[0].defer_loading': expected a boolean, "
            "but got a string instead.",
            "agent.tools[0].defer_loading",
        ),
        (
            [{"type": "web_search", "mode": "sometimes"}],
            "Invalid value: 'sometimes'. Supported values are: 'disabled', 'cached' and 'live'.",
            "agent.tools[0].mode",
        ),
    ],
)
def test_shape_errors_name_the_inline_path(
    api: Api, tools: list[dict[str, Any]], message: str, param: str
) -> None:
    """wire-semantics.md, "Configuration validation": shape errors carry the JSON path
    as param, prefixed with ``agent.`` on Session create, in the observed messages."""
    error = _error(_create_session(api, tools=tools))
    assert (error["code"], error["message"], error["param"]) == (
        "invalid_request_error",
        message,
        param,
    )


def test_agent_shape_errors_have_no_prefix(api: Api) -> None:
    response = api.http.post("/agents", json={"model": "m", "tools": [{"type": "function"}]})
    error = _error(response)
    assert (error["message"], error["param"]) == (
        "Missing required parameter: 'tools[0].description'.",
        "tools[0].description",
    )


def test_parse_error_message(api: Api) -> None:
    """wire-semantics.md, "Request bodies" (order 4): the parse error's full text."""
    assert _error(_post_raw(api, "/agents", b'{"model": "m",}'))["message"] == PARSE_ERROR


# -- item 8: smaller rules --------------------------------------------------------------


def test_saved_web_search_settings_are_resolved(api: Api) -> None:
    """execution-tools.md, "Web search and programmatic tool calling": null mode is
    saved as live, null context_size as medium, and a supplied location, even ``{}``,
    has city, country, region and timezone."""
    tools = [{"type": "web_search", "mode": None, "context_size": None, "location": {}}]
    response = api.http.post("/agents", json={"model": "m", "tools": tools})
    assert response.status_code == 201, response.text
    parse_strict(Agent, response.json())
    assert response.json()["tools"] == [
        {
            "type": "web_search",
            "mode": "live",
            "context_size": "medium",
            "allowed_domains": None,
            "location": {"city": None, "country": None, "region": None, "timezone": None},
        }
    ]


def test_turns_are_ordered_by_creation_time_then_id(api: Api) -> None:
    """sessions-events.md, "Turns and Items": root Turns are ordered by creation time,
    then ID, so the ID order within one second is the creation order."""
    session = api.create_session()
    for text in ("two", "three"):
        api.wait_status(session["id"], "idle")
        assert api.post_events(session["id"], [message_event(text)]).status_code == 202
    api.wait_status(session["id"], "idle")
    turns = api.http.get(f"/agents/sessions/{session['id']}/turns", params={"order": "asc"})
    data = turns.json()["data"]
    assert [turn["id"] for turn in data] == sorted(turn["id"] for turn in data)
    keys = [(turn["created_at"], turn["id"]) for turn in data]
    assert keys == sorted(keys)


def test_fault_503_uses_the_contract_code_and_no_retry_after(
    make_core: Callable[..., LocalCore],
) -> None:
    """error-codes.md, "HTTP API codes": execution that is not available answers 503
    ``execution_unavailable`` with type ``server_error``, and no 503 carries
    Retry-After."""
    api = Api(make_core(faults=Faults(reject_input_every=1)))
    try:
        session = api.create_session()
        response = api.post_events(session["id"], [message_event("x")])
        error = _error(response, 503)
        assert (error["type"], error["code"]) == ("server_error", "execution_unavailable")
        assert "retry-after" not in response.headers
    finally:
        api.close()


def test_unknown_route_error_type_follows_its_code(api: Api) -> None:
    """error-codes.md, 'Which "code" is meant': the type is not_found_error only when
    the code is, so an unknown route (code unsupported_operation) has type
    invalid_request_error."""
    error = _error(api.http.get("/agents/nope/deeper/still"), 404)
    assert (error["type"], error["code"]) == ("invalid_request_error", "unsupported_operation")
