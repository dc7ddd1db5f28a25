"""Local admission checks: one case per rule, plus property tests over generated tools."""

from __future__ import annotations

import copy
import json
import math
import typing
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
import typing_extensions
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.types.beta.persisted_agent_tool_param import PersistedAgentToolParam

from openagentcore._admission import (
    check_session_config,
    check_text,
    check_tools,
    survives_binary64,
)
from openagentcore._errors import AdmissionError

PROTOCOL = "invalid_request_error"
UNSUPPORTED = "unsupported_or_invalid_configuration"

Tool = dict[str, Any]


def function(name: str = "lookup", **overrides: Any) -> Tool:
    tool: Tool = {
        "type": "function",
        "name": name,
        "description": "Look a ticket up.",
        "parameters": {"type": "object", "properties": {"id": {"type": "string"}}},
    }
    tool.update(overrides)
    return tool


def mcp(label: str = "tickets", **overrides: Any) -> Tool:
    tool: Tool = {
        "type": "mcp",
        "server_label": label,
        "transport": {"type": "http", "server_url": "https://mcp.example.com/mcp"},
    }
    tool.update(overrides)
    return tool


def http(url: str, **members: Any) -> dict[str, Any]:
    return {"type": "http", "server_url": url, **members}


WEB_SEARCH_OFF: Tool = {"type": "web_search", "mode": "disabled"}
PROGRAMMATIC_OFF: Tool = {"type": "programmatic_tool_calling", "enabled": False}
TOOL_SEARCH: Tool = {"type": "tool_search"}


def json_schema(schema: Any) -> dict[str, Any]:
    return {"format": {"type": "json_schema", "schema": schema}}


def raised(check: Callable[[], None]) -> AdmissionError:
    with pytest.raises(AdmissionError) as caught:
        check()
    return caught.value


# Valid configurations.

EXECUTABLE_TOOLS: list[list[Tool]] = [
    [],
    [function()],
    [function("a"), function("b", defer_loading=False)],
    [function("eager"), function("lazy", defer_loading=True), TOOL_SEARCH],
    [WEB_SEARCH_OFF, PROGRAMMATIC_OFF],
    [
        {
            "type": "web_search",
            "mode": "disabled",
            "context_size": None,
            "allowed_domains": [],
            "location": {"city": "Oslo", "country": None},
        }
    ],
    [mcp(), mcp("docs", transport=http("http://10.0.0.2:8080/a/b"))],
    [
        mcp(
            allowed_tools=["lookup_ticket"],
            connection_origin="service",
            credential_id=None,
            request_metadata={},
            required=False,
            transport=http("https://mcp.example.com/mcp", headers={}),
        )
    ],
    [function(parameters={})],  # a schema without a root type is not checked
    [function(parameters={"type": ["object", "null"]})],  # nor one with a non-string type
    [function("x" * 512)],
    [function("\u00e9" * 256)],  # 512 bytes of UTF-8
    [function(f"f{i}") for i in range(64)],
]


@pytest.mark.parametrize("tools", EXECUTABLE_TOOLS)
def test_executable_tools_pass_for_agents_and_sessions(tools: list[Tool]) -> None:
    check_tools(tools, for_session=False)
    check_tools(tools, for_session=True)
    check_session_config(tools=tools)


@pytest.mark.parametrize(
    "text",
    [
        None,
        {},
        {"format": None, "verbosity": None},
        {"format": {"type": "text"}, "verbosity": "medium"},
        json_schema({"type": "object", "properties": {"n": {"type": "number", "maximum": 0.1}}}),
        json_schema({"type": "object", "minimum": 2**53, "enum": [-(2**53), 1e308, 5e-324]}),
        json_schema({"type": "object", "multipleOf": Decimal("0.01"), "x": Decimal("1E+20")}),
    ],
)
def test_valid_text_passes_on_every_harness(text: dict[str, Any] | None) -> None:
    check_text(text, for_session=False)
    check_text(text, harness="claude_sdk", for_session=True)
    check_session_config(text=text, harness="claude_sdk")


# One case per rule: (tools, expected code, tool, field). Protocol errors apply to saved
# Agents and Sessions alike; execution errors only to Sessions.

PROTOCOL_CASES: dict[str, tuple[list[Tool], str, str]] = {
    "tools entry not an object": ([function(), "lookup"], "tools[1]", "tools[1]"),  # type: ignore[list-item]
    "type missing": ([{"name": "f"}], "f", "tools[0].type"),
    "type not a string": ([{"type": 3}], "tools[0]", "tools[0].type"),
    "unknown tool type": ([function(), {"type": "code_interpreter"}], "tools[1]", "tools[1].type"),
    "unknown function member": ([function(strict=True)], "lookup", "tools[0].strict"),
    "member differs only by case": ([function(Description="x")], "lookup", "tools[0].Description"),
    "name missing": (
        [{"type": "function", "description": "d", "parameters": {}}],
        "tools[0]",
        "tools[0].name",
    ),
    "name not a string": ([function(name=7)], "tools[0]", "tools[0].name"),  # type: ignore[arg-type]
    "description missing": (
        [{"type": "function", "name": "f", "parameters": {}}],
        "f",
        "tools[0].description",
    ),
    "description null": ([function(description=None)], "lookup", "tools[0].description"),
    "parameters missing": (
        [{"type": "function", "name": "f", "description": "d"}],
        "f",
        "tools[0].parameters",
    ),
    "parameters not an object": (
        [function(parameters='{"type": "object"}')],
        "lookup",
        "tools[0].parameters",
    ),
    "parameters root type array": (
        [function(parameters={"type": "array"})],
        "lookup",
        "tools[0].parameters.type",
    ),
    "defer_loading null": ([function(defer_loading=None)], "lookup", "tools[0].defer_loading"),
    "defer_loading a string": (
        [function(defer_loading="true")],
        "lookup",
        "tools[0].defer_loading",
    ),
    "duplicate function name": (
        [function("a"), function("b"), function("a")],
        "a",
        "tools[2].name",
    ),
    "tool_search with extra member": (
        [{"type": "tool_search", "max_num_results": 3}],
        "tools[0]",
        "tools[0].max_num_results",
    ),
    "duplicate tool_search": (
        [function(defer_loading=True), TOOL_SEARCH, TOOL_SEARCH],
        "tools[2]",
        "tools[2].type",
    ),
    "duplicate web_search": (
        [WEB_SEARCH_OFF, PROGRAMMATIC_OFF, WEB_SEARCH_OFF],
        "tools[2]",
        "tools[2].type",
    ),
    "web_search mode unknown": (
        [{"type": "web_search", "mode": "off"}],
        "tools[0]",
        "tools[0].mode",
    ),
    "web_search context_size unknown": (
        [{"type": "web_search", "mode": "disabled", "context_size": "huge"}],
        "tools[0]",
        "tools[0].context_size",
    ),
    "web_search location member unknown": (
        [{"type": "web_search", "mode": "disabled", "location": {"zip": "0150"}}],
        "tools[0]",
        "tools[0].location.zip",
    ),
    "programmatic enabled null": (
        [{"type": "programmatic_tool_calling", "enabled": None}],
        "tools[0]",
        "tools[0].enabled",
    ),
    "mcp server_label missing": (
        [{"type": "mcp", "transport": http("https://h/mcp")}],
        "tools[0]",
        "tools[0].server_label",
    ),
    "mcp transport missing": ([{"type": "mcp", "server_label": "s"}], "s", "tools[0].transport"),
    "mcp transport type unknown": (
        [mcp(transport={"type": "websocket", "server_url": "wss://h"})],
        "tickets",
        "tools[0].transport.type",
    ),
    "mcp server_url missing": (
        [mcp(transport={"type": "http"})],
        "tickets",
        "tools[0].transport.server_url",
    ),
    "mcp headers not strings": (
        [mcp(transport=http("https://h/mcp", headers={"X-Retry": 3}))],
        "tickets",
        "tools[0].transport.headers",
    ),
    "mcp allowed_tools not a list": (
        [mcp(allowed_tools="lookup")],
        "tickets",
        "tools[0].allowed_tools",
    ),
    "mcp connection_origin unknown": (
        [mcp(connection_origin="browser")],
        "tickets",
        "tools[0].connection_origin",
    ),
    "mcp required null": ([mcp(required=None)], "tickets", "tools[0].required"),
}


@pytest.mark.parametrize("for_session", [False, True])
@pytest.mark.parametrize(
    ("tools", "tool", "field"), list(PROTOCOL_CASES.values()), ids=list(PROTOCOL_CASES)
)
def test_protocol_errors_reject_agents_and_sessions(
    tools: list[Tool], tool: str, field: str, for_session: bool
) -> None:
    error = raised(lambda: check_tools(tools, for_session=for_session))
    assert (error.code, error.tool, error.field) == (PROTOCOL, tool, field)
    assert error.message.startswith(field)


EXECUTION_CASES: dict[str, tuple[list[Tool], str | None, str | None]] = {
    "more than 64 functions": ([function(f"f{i}") for i in range(65)], None, None),
    "blank function name": ([function("lookup"), function(" \t")], "tools[1]", "tools[1].name"),
    "empty function name": ([function("")], "tools[0]", "tools[0].name"),
    "function name over 512 bytes": ([function("\u00e9" * 256 + "x")], "tools[0]", "tools[0].name"),
    "deferred function without tool_search": (
        [function("eager"), function("lazy", defer_loading=True)],
        "lazy",
        "tools[1].defer_loading",
    ),
    "tool_search without a deferred function": (
        [function("eager", defer_loading=False), TOOL_SEARCH],
        "tools[1]",
        "tools[1].type",
    ),
    "web_search mode omitted": ([{"type": "web_search"}], "tools[0]", "tools[0].mode"),
    "web_search mode null": ([{"type": "web_search", "mode": None}], "tools[0]", "tools[0].mode"),
    "web_search mode live": ([{"type": "web_search", "mode": "live"}], "tools[0]", "tools[0].mode"),
    "web_search mode cached": (
        [{"type": "web_search", "mode": "cached"}],
        "tools[0]",
        "tools[0].mode",
    ),
    "programmatic enabled omitted": (
        [{"type": "programmatic_tool_calling"}],
        "tools[0]",
        "tools[0].enabled",
    ),
    "programmatic enabled true": (
        [{"type": "programmatic_tool_calling", "enabled": True}],
        "tools[0]",
        "tools[0].enabled",
    ),
    "duplicate programmatic_tool_calling": (
        [PROGRAMMATIC_OFF, PROGRAMMATIC_OFF],
        "tools[1]",
        "tools[1].type",
    ),
    "computer_use": ([{"type": "computer_use"}], "tools[0]", "tools[0].type"),
    "automations": ([{"type": "automations"}], "tools[0]", "tools[0].type"),
    "mcp blank label": ([mcp("  ")], "tools[0]", "tools[0].server_label"),
    "mcp duplicate label": ([mcp("a"), mcp("b"), mcp("a")], "a", "tools[2].server_label"),
    "mcp stdio transport": (
        [mcp(transport={"type": "stdio", "command": "srv", "cwd": "/"})],
        "tickets",
        "tools[0].transport.type",
    ),
    "mcp relative url": ([mcp(transport=http("/mcp"))], "tickets", "tools[0].transport.server_url"),
    "mcp ftp url": (
        [mcp(transport=http("ftp://h/mcp"))],
        "tickets",
        "tools[0].transport.server_url",
    ),
    "mcp url without host": (
        [mcp(transport=http("https:///mcp"))],
        "tickets",
        "tools[0].transport.server_url",
    ),
    "mcp url with bad port": (
        [mcp(transport=http("https://h:99999/mcp"))],
        "tickets",
        "tools[0].transport.server_url",
    ),
    "mcp url with whitespace": (
        [mcp(transport=http("https://h/m cp"))],
        "tickets",
        "tools[0].transport.server_url",
    ),
    "mcp url with userinfo": (
        [mcp(transport=http("https://user@h/mcp"))],
        "tickets",
        "tools[0].transport.server_url",
    ),
    "mcp url with query": (
        [mcp(transport=http("https://h/mcp?key=1"))],
        "tickets",
        "tools[0].transport.server_url",
    ),
    "mcp url with empty query": (
        [mcp(transport=http("https://h/mcp?"))],
        "tickets",
        "tools[0].transport.server_url",
    ),
    "mcp url with fragment": (
        [mcp(transport=http("https://h/mcp#top"))],
        "tickets",
        "tools[0].transport.server_url",
    ),
    "mcp nonempty headers": (
        [mcp(transport=http("https://h/mcp", headers={"X-Team": "a"}))],
        "tickets",
        "tools[0].transport.headers",
    ),
    "mcp inline authorization": (
        [mcp(transport=http("https://h/mcp", authorization="Bearer s3cret"))],
        "tickets",
        "tools[0].transport.authorization",
    ),
    "mcp nonempty request_metadata": (
        [mcp(request_metadata={"team": "a"})],
        "tickets",
        "tools[0].request_metadata",
    ),
}

# Saved Agents keep every pinned declaration; these carry members only an inline
# Session transport has, so saving them is a protocol error instead.
SESSION_ONLY_SHAPES = {"mcp inline authorization"}


@pytest.mark.parametrize(
    ("tools", "tool", "field"), list(EXECUTION_CASES.values()), ids=list(EXECUTION_CASES)
)
def test_execution_rules_reject_sessions_only(
    tools: list[Tool], tool: str | None, field: str | None, request: pytest.FixtureRequest
) -> None:
    error = raised(lambda: check_tools(tools, for_session=True))
    assert (error.code, error.tool, error.field) == (UNSUPPORTED, tool, field)
    assert error.message.startswith(field or "tools:")
    if request.node.callspec.id in SESSION_ONLY_SHAPES:
        saved = raised(lambda: check_tools(tools, for_session=False))
        assert (saved.code, saved.field) == (PROTOCOL, field)
    else:
        check_tools(tools, for_session=False)


# The official client's saved-Agent tool union is the oracle for the pinned members.

VALID_BY_TYPE: dict[str, Tool] = {
    "function": function(),
    "tool_search": TOOL_SEARCH,
    "programmatic_tool_calling": PROGRAMMATIC_OFF,
    "mcp": mcp(),
    "web_search": WEB_SEARCH_OFF,
    "computer_use": {"type": "computer_use"},
    "automations": {"type": "automations"},
}


def pinned_tool_hints() -> dict[str, dict[str, Any]]:
    """Member type hints of each declaration in the pinned tool union, by tool type."""
    by_type = {}
    for declaration in typing.get_args(PersistedAgentToolParam):
        hints = typing.get_type_hints(declaration, include_extras=True)
        (tool_type,) = typing.get_args(typing.get_args(hints.pop("type"))[0])
        by_type[tool_type] = hints
    return by_type


def pinned_members() -> list[tuple[str, str, bool]]:
    """(tool type, member, required) for every member of the pinned tool union."""
    return [
        (tool_type, member, typing.get_origin(hint) is typing_extensions.Required)
        for tool_type, hints in pinned_tool_hints().items()
        for member, hint in hints.items()
    ]


def test_every_pinned_tool_type_is_known() -> None:
    assert set(pinned_tool_hints()) == set(VALID_BY_TYPE)
    for tool in VALID_BY_TYPE.values():
        check_tools([tool], for_session=False)


@pytest.mark.parametrize(("tool_type", "member", "required"), pinned_members())
def test_pinned_members_are_known_and_required_ones_enforced(
    tool_type: str, member: str, required: bool
) -> None:
    mistyped = {**VALID_BY_TYPE[tool_type], member: object()}
    error = raised(lambda: check_tools([mistyped], for_session=False))
    assert (error.field, error.code) == (f"tools[0].{member}", PROTOCOL)
    assert "unknown member" not in error.message
    if required:
        missing = {k: v for k, v in VALID_BY_TYPE[tool_type].items() if k != member}
        error = raised(lambda: check_tools([missing], for_session=False))
        assert (error.field, error.code) == (f"tools[0].{member}", PROTOCOL)
        assert "required" in error.message


def test_function_names_may_be_any_length_on_a_saved_agent() -> None:
    check_tools([function("n" * 10_000), function("")], for_session=False)


def test_tools_must_be_an_array() -> None:
    error = raised(lambda: check_tools({"type": "tool_search"}, for_session=False))  # type: ignore[arg-type]
    assert (error.code, error.tool, error.field) == (PROTOCOL, None, "tools")


# Order: shapes of every tool, then text's shape, then conflicts and schema roots, then
# execution rules.


def test_a_later_shape_error_wins_over_an_earlier_duplicate() -> None:
    tools = [function("a"), function("a"), function("b", defer_loading=None)]
    assert raised(lambda: check_tools(tools, for_session=False)).field == "tools[2].defer_loading"


def test_within_a_tool_unknown_members_come_before_bad_values_and_missing_members() -> None:
    tools = [{"type": "function", "defer_loading": None, "extra": 1}]
    assert raised(lambda: check_tools(tools, for_session=False)).field == "tools[0].extra"
    tools = [{"type": "function", "defer_loading": None}]
    assert raised(lambda: check_tools(tools, for_session=False)).field == "tools[0].defer_loading"


def test_protocol_errors_come_before_execution_errors() -> None:
    tools = [{"type": "web_search"}, function("a"), function("a")]
    error = raised(lambda: check_tools(tools, for_session=True))
    assert (error.code, error.field) == (PROTOCOL, "tools[2].name")


def test_text_shape_is_checked_before_tool_conflicts() -> None:
    error = raised(
        lambda: check_session_config(
            tools=[function("a"), function("a")], text={"format": {"type": "json"}}
        )
    )
    assert error.field == "text.format.type"


def test_text_schema_root_is_checked_after_tool_conflicts() -> None:
    error = raised(
        lambda: check_session_config(
            tools=[function("a"), function("a")], text=json_schema({"type": "array"})
        )
    )
    assert error.field == "tools[1].name"


def test_text_schema_root_is_checked_before_execution_rules() -> None:
    error = raised(
        lambda: check_session_config(
            tools=[{"type": "web_search"}], text=json_schema({"type": "array"})
        )
    )
    assert (error.code, error.field) == (PROTOCOL, "text.format.schema.type")


# Echo bounds and secrets.


def test_long_or_unprintable_names_are_not_repeated() -> None:
    long_name = "n" * 257
    error = raised(
        lambda: check_tools([function(long_name), function(long_name)], for_session=False)
    )
    assert (error.tool, error.field) == ("tools[1]", "tools[1].name")
    assert long_name not in error.message
    control = "bad\x00name"
    error = raised(lambda: check_tools([function(control, defer_loading=1)], for_session=False))
    assert error.tool == "tools[0]"
    assert control not in error.message


def test_names_up_to_256_bytes_are_repeated() -> None:
    name = "\u00e9" * 128
    error = raised(lambda: check_tools([function(name), function(name)], for_session=False))
    assert error.tool == name
    assert f"'{name}'" in error.message


def test_url_credentials_and_authorization_never_appear_in_messages() -> None:
    for transport in (
        http("https://admin:hunter2@h/mcp"),
        http("https://h/mcp?token=hunter2"),
        http("https://h/mcp", authorization="Bearer hunter2"),
        http("https://h/mcp", headers={"Authorization": "Bearer hunter2"}),
    ):
        error = raised(lambda t=transport: check_tools([mcp(transport=t)], for_session=True))  # type: ignore[misc]
        assert "hunter2" not in str(error)
        assert "hunter2" not in repr(error)


def test_unknown_values_are_repeated_only_when_short() -> None:
    error = raised(
        lambda: check_tools([{"type": "web_search", "mode": "x" * 300}], for_session=False)
    )
    assert "x" * 300 not in error.message
    error = raised(lambda: check_tools([{"type": "web_search", "mode": "off"}], for_session=False))
    assert "'off'" in error.message
    assert "disabled, cached, live" in error.message


# text.


TEXT_PROTOCOL_CASES: dict[str, tuple[Any, str]] = {
    "text not an object": ("json", "text"),
    "unknown text member": ({"fmt": {"type": "text"}}, "text.fmt"),
    "verbosity unknown": ({"verbosity": "loud"}, "text.verbosity"),
    "format type missing": ({"format": {"schema": {}}}, "text.format.type"),
    "format type unknown": ({"format": {"type": "json_object"}}, "text.format.type"),
    "text format with schema": (
        {"format": {"type": "text", "schema": {}}},
        "text.format.schema",
    ),
    "json_schema without schema": ({"format": {"type": "json_schema"}}, "text.format.schema"),
    "schema not an object": (json_schema([{"type": "object"}]), "text.format.schema"),
    "responses wrapper name": (
        {"format": {"type": "json_schema", "name": "answer", "schema": {"type": "object"}}},
        "text.format.name",
    ),
    "responses wrapper strict": (
        {"format": {"type": "json_schema", "strict": True, "schema": {"type": "object"}}},
        "text.format.strict",
    ),
    "schema root type string": (json_schema({"type": "string"}), "text.format.schema.type"),
}


@pytest.mark.parametrize("harness", [None, "codex", "claude_sdk", "mcode"])
@pytest.mark.parametrize("for_session", [False, True])
@pytest.mark.parametrize(
    ("text", "field"), list(TEXT_PROTOCOL_CASES.values()), ids=list(TEXT_PROTOCOL_CASES)
)
def test_text_protocol_errors(
    text: Any, field: str, for_session: bool, harness: str | None
) -> None:
    error = raised(lambda: check_text(text, harness=harness, for_session=for_session))
    assert (error.code, error.tool, error.field) == (PROTOCOL, None, field)


def test_responses_wrapper_fields_get_a_hint() -> None:
    error = raised(
        lambda: check_text(TEXT_PROTOCOL_CASES["responses wrapper name"][0], for_session=False)
    )
    assert "{type, schema}" in error.message


CLAUDE_TEXT_CASES: dict[str, tuple[Any, str]] = {
    "no root type": (json_schema({"properties": {}}), "text.format.schema.type"),
    "array-valued root type": (json_schema({"type": ["object"]}), "text.format.schema.type"),
    "integer beyond 2**53": (
        json_schema({"type": "object", "properties": {"n": {"maximum": 2**53 + 1}}}),
        "text.format.schema.properties.n.maximum",
    ),
    "integer overflowing a double": (
        json_schema({"type": "object", "enum": [1, 10**400]}),
        "text.format.schema.enum[1]",
    ),
    "decimal overflowing a double": (
        json_schema({"type": "object", "maximum": Decimal("1e400")}),
        "text.format.schema.maximum",
    ),
    "decimal underflowing to zero": (
        json_schema({"type": "object", "minimum": Decimal("1e-400")}),
        "text.format.schema.minimum",
    ),
    "too many digits": (
        json_schema({"type": "object", "const": Decimal("0.1000000000000000000001")}),
        "text.format.schema.const",
    ),
    "infinity from json.loads('1e400')": (
        json_schema({"type": "object", "maximum": float("inf")}),
        "text.format.schema.maximum",
    ),
    "nan": (json_schema({"type": "object", "maximum": float("nan")}), "text.format.schema.maximum"),
    "decimal nan": (
        json_schema({"type": "object", "maximum": Decimal("sNaN")}),
        "text.format.schema.maximum",
    ),
}


@pytest.mark.parametrize(
    ("text", "field"), list(CLAUDE_TEXT_CASES.values()), ids=list(CLAUDE_TEXT_CASES)
)
def test_claude_session_rules_for_structured_output(text: Any, field: str) -> None:
    error = raised(lambda: check_text(text, harness="claude_sdk", for_session=True))
    assert (error.code, error.field) == (UNSUPPORTED, field)
    # Saved Agents keep such schemas unchanged.
    check_text(text, harness="claude_sdk", for_session=False)


def test_binary64_paths_hide_long_member_names() -> None:
    key = "k" * 300
    error = raised(
        lambda: check_text(
            json_schema({"type": "object", "properties": {key: {"maximum": 2**60 + 1}}}),
            harness="claude_sdk",
            for_session=True,
        )
    )
    assert error.field == "text.format.schema.properties.<member>.maximum"
    assert key not in error.message


def test_booleans_are_not_numbers() -> None:
    check_text(
        json_schema({"type": "object", "additionalProperties": False, "x": True}),
        harness="claude_sdk",
        for_session=True,
    )


def test_deeply_nested_schemas_do_not_hit_the_recursion_limit() -> None:
    schema: dict[str, Any] = {"type": "object", "maximum": 1}
    for _ in range(5_000):
        schema = {"type": "object", "not": schema}
    check_text(json_schema(schema), harness="claude_sdk", for_session=True)


@pytest.mark.parametrize("harness", ["codex", "mcode"])
def test_structured_output_runs_only_on_claude(harness: str) -> None:
    text = json_schema({"type": "object"})
    error = raised(lambda: check_text(text, harness=harness, for_session=True))
    assert (error.code, error.field) == (UNSUPPORTED, "text.format.type")
    check_text(text, harness=harness, for_session=False)
    check_text(text, for_session=True)  # the deployment default is unknown locally


@pytest.mark.parametrize(
    ("harness", "allowed"), [("codex", True), ("claude_sdk", False), ("mcode", False)]
)
def test_verbosity_other_than_medium(harness: str, allowed: bool) -> None:
    text = {"verbosity": "high"}
    if allowed:
        check_text(text, harness=harness, for_session=True)
    else:
        error = raised(lambda: check_text(text, harness=harness, for_session=True))
        assert (error.code, error.field) == (UNSUPPORTED, "text.verbosity")
    check_text(text, harness=harness, for_session=False)


@pytest.mark.parametrize("harness", ["claude", "claude_code", "", "CODEX"])
def test_unknown_harness_names_are_rejected(harness: str) -> None:
    error = raised(lambda: check_text(None, harness=harness, for_session=False))
    assert (error.code, error.field) == (PROTOCOL, "x_agents_core.harness")
    assert "claude_sdk" in error.message


# Harness profiles in check_session_config.

HARNESS_CASES: dict[str, tuple[str, list[Tool], Any, str]] = {
    "mcode runs no functions": ("mcode", [function()], None, "tools[0].type"),
    "codex runs no tool_search": (
        "codex",
        [function(defer_loading=True), TOOL_SEARCH],
        None,
        "tools[1].type",
    ),
    "claude tool_search with structured output": (
        "claude_sdk",
        [function(defer_loading=True), TOOL_SEARCH],
        json_schema({"type": "object"}),
        "tools[1].type",
    ),
    "claude mcp with structured output": (
        "claude_sdk",
        [mcp()],
        json_schema({"type": "object"}),
        "tools[0].type",
    ),
    "claude mcp with tool_search": (
        "claude_sdk",
        [function(defer_loading=True), TOOL_SEARCH, mcp()],
        None,
        "tools[2].type",
    ),
    "claude mcp label with a dot": (
        "claude_sdk",
        [mcp("tickets.v2")],
        None,
        "tools[0].server_label",
    ),
    "claude mcp label functions": ("claude_sdk", [mcp("functions")], None, "tools[0].server_label"),
    "mcode required mcp": ("mcode", [mcp(required=True)], None, "tools[0].required"),
}


@pytest.mark.parametrize(
    ("harness", "tools", "text", "field"), list(HARNESS_CASES.values()), ids=list(HARNESS_CASES)
)
def test_harness_profiles(harness: str, tools: list[Tool], text: Any, field: str) -> None:
    error = raised(lambda: check_session_config(tools=tools, text=text, harness=harness))
    assert (error.code, error.field) == (UNSUPPORTED, field)
    check_session_config(tools=tools, text=text)  # fine when the Harness is not known


def test_each_harness_runs_its_qualified_profile() -> None:
    check_session_config(
        tools=[function("a"), function("b", defer_loading=True), TOOL_SEARCH, WEB_SEARCH_OFF],
        text={"verbosity": "medium"},
        harness="claude_sdk",
    )
    check_session_config(tools=[function(), mcp(), PROGRAMMATIC_OFF], harness="codex")
    check_session_config(tools=[mcp(), WEB_SEARCH_OFF], harness="mcode")


# Property tests.

NAME = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_", min_size=1, max_size=40)
LABEL = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=20)
JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-(2**53), 2**53), st.text(max_size=8))
PROPERTY_SCHEMA = st.fixed_dictionaries(
    {"type": st.sampled_from(["string", "integer", "number", "boolean"])},
    optional={"description": st.text(max_size=20), "default": JSON_LEAF},
)
PARAMETERS = st.fixed_dictionaries(
    {},
    optional={
        "type": st.just("object"),
        "properties": st.dictionaries(NAME, PROPERTY_SCHEMA, max_size=3),
        "additionalProperties": st.booleans(),
    },
)
SERVER_URL = st.builds(
    "{}://{}{}/{}".format,
    st.sampled_from(["http", "https", "HTTPS"]),
    st.sampled_from(["mcp.example.com", "10.0.0.7", "[::1]", "localhost"]),
    st.sampled_from(["", ":8443"]),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz/", max_size=12),
)


@st.composite
def executable_tools(draw: st.DrawFn) -> list[Tool]:
    """Tool lists every Harness-independent rule accepts, for Agents and Sessions."""
    names = draw(st.lists(NAME, unique=True, max_size=6))
    tools: list[Tool] = []
    for name in names:
        tool = function(
            name,
            description=draw(st.text(max_size=30)),
            parameters=draw(PARAMETERS),
        )
        defer = draw(st.sampled_from([None, False, True]))
        if defer is not None:
            tool["defer_loading"] = defer
        tools.append(tool)
    if any(tool.get("defer_loading") is True for tool in tools):
        tools.append(dict(TOOL_SEARCH))
    if draw(st.booleans()):
        search: Tool = {"type": "web_search", "mode": "disabled"}
        if draw(st.booleans()):
            search["context_size"] = draw(st.sampled_from([None, "low", "medium", "high"]))
        tools.append(search)
    if draw(st.booleans()):
        tools.append(dict(PROGRAMMATIC_OFF))
    for label in draw(st.lists(LABEL, unique=True, max_size=3)):
        server = mcp(label, transport=http(draw(SERVER_URL)))
        if draw(st.booleans()):
            server["allowed_tools"] = draw(st.one_of(st.none(), st.lists(NAME, max_size=2)))
        if draw(st.booleans()):
            server["required"] = draw(st.booleans())
        tools.append(server)
    return draw(st.permutations(tools))


FAST = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(executable_tools())
def test_generated_executable_tools_pass(tools: list[Tool]) -> None:
    check_tools(tools, for_session=False)
    check_tools(tools, for_session=True)
    check_session_config(tools=tools)


# A mutation breaks exactly one rule of a valid list. It returns the broken list, the
# expected error code, the label of the tool it broke and the field, and whether a
# saved Agent must reject it too.
Mutation = Callable[[list[Tool], st.DrawFn], "tuple[list[Tool], str, str | None, str | None]"]


def _insert(tools: list[Tool], tool: Tool, draw: st.DrawFn) -> int:
    index = draw(st.integers(0, len(tools)))
    tools.insert(index, tool)
    return index


def _positions(tools: list[Tool], tool_type: str) -> list[int]:
    return [i for i, tool in enumerate(tools) if tool["type"] == tool_type]


def _label(tools: list[Tool], index: int) -> str:
    tool = tools[index]
    return str(tool.get("server_label") if tool["type"] == "mcp" else tool.get("name", ""))


def mutate_duplicate_name(
    tools: list[Tool], draw: st.DrawFn
) -> tuple[list[Tool], str, str | None, str | None]:
    existing = _positions(tools, "function")
    name = tools[draw(st.sampled_from(existing))]["name"] if existing else "Twin"
    if not existing:
        _insert(tools, function(name), draw)
    _insert(tools, function(name), draw)
    second = [i for i in _positions(tools, "function") if tools[i]["name"] == name][1]
    return tools, PROTOCOL, name, f"tools[{second}].name"


def _expected_label(name: object, index: int) -> str:
    """The name when a message may repeat it (nonblank, printable, <= 256 bytes)."""
    if isinstance(name, str) and name.strip() and name.isprintable() and len(name.encode()) <= 256:
        return name
    return f"tools[{index}]"


def _broken_function(member: str, value: Any, *, code: str) -> Mutation:
    def mutate(
        tools: list[Tool], draw: st.DrawFn
    ) -> tuple[list[Tool], str, str | None, str | None]:
        tool = function("Broken-Fn")
        if value is _MISSING:
            del tool[member]
        else:
            tool[member] = value
        index = _insert(tools, tool, draw)
        return tools, code, _expected_label(tool.get("name"), index), f"tools[{index}].{member}"

    return mutate


_MISSING = object()


def mutate_root_type(
    tools: list[Tool], draw: st.DrawFn
) -> tuple[list[Tool], str, str | None, str | None]:
    existing = _positions(tools, "function")
    if existing:
        index = draw(st.sampled_from(existing))
        tools[index]["parameters"] = {**tools[index]["parameters"], "type": "array"}
    else:
        index = _insert(tools, function("Rooted", parameters={"type": "string"}), draw)
    return tools, PROTOCOL, _label(tools, index), f"tools[{index}].parameters.type"


def mutate_repeat_singleton(tool_type: str) -> Mutation:
    def mutate(
        tools: list[Tool], draw: st.DrawFn
    ) -> tuple[list[Tool], str, str | None, str | None]:
        if tool_type == "tool_search" and not _positions(tools, "tool_search"):
            _insert(tools, function("Deferred", defer_loading=True), draw)
        declaration = (
            {"type": tool_type, "mode": "disabled"}
            if tool_type == "web_search"
            else {"type": tool_type}
        )
        while len(_positions(tools, tool_type)) < 2:
            _insert(tools, declaration, draw)
        second = _positions(tools, tool_type)[1]
        return tools, PROTOCOL, f"tools[{second}]", f"tools[{second}].type"

    return mutate


def mutate_unpair_tool_search(
    tools: list[Tool], draw: st.DrawFn
) -> tuple[list[Tool], str, str | None, str | None]:
    searches = _positions(tools, "tool_search")
    if searches:
        del tools[searches[0]]
        deferred = next(i for i, t in enumerate(tools) if t.get("defer_loading") is True)
        return tools, UNSUPPORTED, _label(tools, deferred), f"tools[{deferred}].defer_loading"
    index = _insert(tools, dict(TOOL_SEARCH), draw)
    return tools, UNSUPPORTED, f"tools[{index}]", f"tools[{index}].type"


def _inserted(tool: Tool, member: str, *, code: str, named: bool = False) -> Mutation:
    def mutate(
        tools: list[Tool], draw: st.DrawFn
    ) -> tuple[list[Tool], str, str | None, str | None]:
        # Keep the singletons single, so only the mutated rule breaks.
        tools = [t for t in tools if t["type"] != tool["type"]]
        index = _insert(tools, copy.deepcopy(tool), draw)
        return (
            tools,
            code,
            _label(tools, index) if named else f"tools[{index}]",
            f"tools[{index}].{member}",
        )

    return mutate


def mutate_duplicate_label(
    tools: list[Tool], draw: st.DrawFn
) -> tuple[list[Tool], str, str | None, str | None]:
    existing = _positions(tools, "mcp")
    label = tools[draw(st.sampled_from(existing))]["server_label"] if existing else "Twin"
    if not existing:
        _insert(tools, mcp(label), draw)
    _insert(tools, mcp(label), draw)
    second = [i for i in _positions(tools, "mcp") if tools[i]["server_label"] == label][1]
    return tools, UNSUPPORTED, label, f"tools[{second}].server_label"


def mutate_too_many_functions(
    tools: list[Tool], draw: st.DrawFn
) -> tuple[list[Tool], str, str | None, str | None]:
    count = len(_positions(tools, "function"))
    for i in range(65 - count):
        _insert(tools, function(f"Extra-{i}"), draw)
    return tools, UNSUPPORTED, None, None


PROTOCOL_MUTATIONS: dict[str, Mutation] = {
    "duplicate name": mutate_duplicate_name,
    "root type": mutate_root_type,
    "repeated web_search": mutate_repeat_singleton("web_search"),
    "repeated tool_search": mutate_repeat_singleton("tool_search"),
    "description missing": _broken_function("description", _MISSING, code=PROTOCOL),
    "description not a string": _broken_function("description", 1.5, code=PROTOCOL),
    "parameters missing": _broken_function("parameters", _MISSING, code=PROTOCOL),
    "parameters an array": _broken_function("parameters", [], code=PROTOCOL),
    "defer_loading null": _broken_function("defer_loading", None, code=PROTOCOL),
    "name missing": _broken_function("name", _MISSING, code=PROTOCOL),
    "unknown member": _broken_function("strict", True, code=PROTOCOL),
    "tool_search member": _inserted(
        {"type": "tool_search", "filters": {}}, "filters", code=PROTOCOL
    ),
    "unknown type": _inserted({"type": "shell"}, "type", code=PROTOCOL),
    "mode unknown": _inserted({"type": "web_search", "mode": "on"}, "mode", code=PROTOCOL),
    "enabled not a bool": _inserted(
        {"type": "programmatic_tool_calling", "enabled": "false"}, "enabled", code=PROTOCOL
    ),
}
SESSION_MUTATIONS: dict[str, Mutation] = {
    "blank name": _broken_function("name", "   ", code=UNSUPPORTED),
    "name over 512 bytes": _broken_function("name", "\u4e00" * 171, code=UNSUPPORTED),
    "tool_search pairing": mutate_unpair_tool_search,
    "too many functions": mutate_too_many_functions,
    "web_search live": _inserted({"type": "web_search", "mode": "live"}, "mode", code=UNSUPPORTED),
    "web_search mode omitted": _inserted({"type": "web_search"}, "mode", code=UNSUPPORTED),
    "programmatic enabled": _inserted(
        {"type": "programmatic_tool_calling", "enabled": True}, "enabled", code=UNSUPPORTED
    ),
    "programmatic omitted": _inserted(
        {"type": "programmatic_tool_calling"}, "enabled", code=UNSUPPORTED
    ),
    "duplicate label": mutate_duplicate_label,
    "mcp stdio": _inserted(
        mcp("Stdio", transport={"type": "stdio", "command": "srv", "cwd": "/"}),
        "transport.type",
        code=UNSUPPORTED,
        named=True,
    ),
    "mcp url credentials": _inserted(
        mcp("Creds", transport=http("https://u:p@h/mcp")),
        "transport.server_url",
        code=UNSUPPORTED,
        named=True,
    ),
    "mcp url query": _inserted(
        mcp("Query", transport=http("https://h/mcp?a=b")),
        "transport.server_url",
        code=UNSUPPORTED,
        named=True,
    ),
    "mcp headers": _inserted(
        mcp("Headers", transport=http("https://h/mcp", headers={"a": "b"})),
        "transport.headers",
        code=UNSUPPORTED,
        named=True,
    ),
    "mcp request_metadata": _inserted(
        mcp("Meta", request_metadata={"a": 1}), "request_metadata", code=UNSUPPORTED, named=True
    ),
    "mcp blank label": _inserted(mcp(""), "server_label", code=UNSUPPORTED),
}


@FAST
@given(executable_tools(), st.sampled_from(sorted(PROTOCOL_MUTATIONS)), st.data())
def test_one_protocol_mutation_rejects_agents_and_sessions(
    tools: list[Tool], mutation: str, data: st.DataObject
) -> None:
    broken, code, tool, field = PROTOCOL_MUTATIONS[mutation](copy.deepcopy(tools), data.draw)
    for for_session in (False, True):
        error = raised(lambda s=for_session: check_tools(broken, for_session=s))  # type: ignore[misc]
        assert (error.code, error.tool, error.field) == (code, tool, field)


@FAST
@given(executable_tools(), st.sampled_from(sorted(SESSION_MUTATIONS)), st.data())
def test_one_execution_mutation_rejects_sessions_only(
    tools: list[Tool], mutation: str, data: st.DataObject
) -> None:
    broken, code, tool, field = SESSION_MUTATIONS[mutation](copy.deepcopy(tools), data.draw)
    error = raised(lambda: check_tools(broken, for_session=True))
    assert (error.code, error.tool, error.field) == (code, tool, field)
    check_tools(broken, for_session=False)


# binary64: an independent shortest-round-trip oracle built from %g formatting.


def shortest_round_trip(value: float) -> Decimal:
    for digits in range(1, 18):
        text = f"{value:.{digits}g}"
        if float(text) == value:
            return Decimal(text)
    raise AssertionError("17 significant digits always round-trip a double")


def oracle(number: int | Decimal) -> bool:
    try:
        value = float(number)
    except OverflowError:
        return False
    return math.isfinite(value) and shortest_round_trip(value) == Decimal(number)


@given(st.integers())
def test_binary64_integers_agree_with_the_oracle(number: int) -> None:
    assert survives_binary64(number) is oracle(number)


@given(st.integers(-(2**53), 2**53))
def test_binary64_integers_up_to_2_53_always_survive(number: int) -> None:
    assert survives_binary64(number)


@given(st.decimals(allow_nan=False, allow_infinity=False, places=None))
def test_binary64_decimals_agree_with_the_oracle(number: Decimal) -> None:
    assert survives_binary64(number) is oracle(number)


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_binary64_reprs_of_doubles_survive(value: float) -> None:
    assert survives_binary64(value)
    assert survives_binary64(Decimal(repr(value)))
    parsed = json.loads(json.dumps(value), parse_float=Decimal, parse_int=Decimal)
    assert survives_binary64(parsed)


@pytest.mark.parametrize(
    ("text", "survives"),
    [
        ("0.1", True),
        ("9007199254740992", True),
        ("9007199254740993", False),
        ("1e400", False),
        ("1e-400", False),
        ("5e-324", True),
        ("0.30000000000000004", True),
        ("0.3000000000000000444", False),
        ("1152921504606846976", False),  # 2**60 is a double, but reads back as ...847000
        ("1E+20", True),
    ],
)
def test_binary64_examples(text: str, survives: bool) -> None:
    assert survives_binary64(Decimal(text)) is survives


def test_plain_json_floats_are_judged_after_python_parsed_them() -> None:
    # json.loads without parse_float=Decimal already rounded to a double, so only
    # overflow to infinity is still visible; parse with Decimal to check the digits.
    assert not survives_binary64(json.loads("1e400"))
    assert survives_binary64(json.loads("0.1000000000000000000001"))
    assert not survives_binary64(json.loads("0.1000000000000000000001", parse_float=Decimal))
