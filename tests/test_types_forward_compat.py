"""Forward compatibility and field presence of the wire models.

A newer server may add event, Item, action and tool types, fields and enum values;
none of these may break parsing or be lost. Function results must keep the difference
between an omitted ``output``/``error`` and an explicit ``null``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from openagentcore import types

CORPUS = Path(__file__).parent / "corpus"

PARSERS: dict[str, Any] = {
    "event": types.parse_event,
    "item": types.parse_item,
    "required_action": types.parse_required_action,
    "tool": TypeAdapter(types.Tool).validate_python,
    "session": types.Session.model_validate,
    "turn": types.Turn.model_validate,
}
UNKNOWN_CLASS: dict[str, type[types.UnknownModel]] = {
    "event": types.UnknownEvent,
    "item": types.UnknownItem,
    "required_action": types.UnknownRequiredAction,
    "tool": types.UnknownTool,
}


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CORPUS / f"{name}.json").read_text())
    return data


def corpus_cases(name: str) -> list[Any]:
    return [pytest.param(case["kind"], case["payload"], id=key) for key, case in load(name).items()]


@pytest.mark.parametrize(("kind", "payload"), corpus_cases("unknown_types"))
def test_unknown_type_parses_to_unknown_value_with_raw_payload(
    kind: str, payload: dict[str, Any]
) -> None:
    parsed = PARSERS[kind](payload)
    assert type(parsed) is UNKNOWN_CLASS[kind]
    assert parsed.type == payload["type"]
    assert parsed.raw == payload
    assert parsed.to_wire() == payload


@pytest.mark.parametrize(("kind", "payload"), corpus_cases("extra_fields"))
def test_unknown_fields_and_values_are_kept(kind: str, payload: dict[str, Any]) -> None:
    parsed = PARSERS[kind](payload)
    assert not isinstance(parsed, types.UnknownModel)
    assert parsed.to_wire() == payload


def test_extra_fields_are_readable_as_model_extra() -> None:
    payload = load("extra_fields")["event"]["payload"]
    event = types.parse_event(payload)
    assert isinstance(event, types.TurnCompletedEvent)
    assert event.model_extra == {"obfuscation": "xYz", "sequence_number": 15}


def test_new_enum_values_are_kept_as_strings() -> None:
    session = types.Session.model_validate(load("extra_fields")["new_status"]["payload"])
    assert session.status == "paused"
    turn = types.Turn.model_validate(load("extra_fields")["new_turn_status"]["payload"])
    assert turn.status == "suspended"
    assert not turn.is_terminal


def test_unknown_members_inside_known_containers() -> None:
    unknown = load("unknown_types")
    session = load("sessions")["requires_action_function_call"]
    session = session | {
        "required_actions": [
            *session["required_actions"],
            unknown["required_action_type"]["payload"],
        ],
        "agent": session["agent"] | {"tools": [unknown["tool_type"]["payload"]]},
    }
    event = types.parse_event(
        {"type": types.SessionRequiresActionEvent.TYPE, "event_id": "evt_1", "session": session}
    )
    assert isinstance(event, types.SessionRequiresActionEvent)
    first, second = event.session.required_actions
    assert isinstance(first, types.FunctionCallAction)
    assert isinstance(second, types.UnknownRequiredAction)
    assert second.raw["path"] == "/tmp/x"
    assert [call.call_id for call in event.session.pending_function_calls] == [first.call_id]
    assert isinstance(event.session.agent.tools[0], types.UnknownTool)

    item = unknown["item_type"]["payload"]
    added = types.parse_event(
        {
            "type": types.ItemAddedEvent.TYPE,
            "event_id": "evt_2",
            "session_id": "s",
            "output_index": 0,
            "item": item,
        }
    )
    assert isinstance(added, types.ItemAddedEvent)
    assert isinstance(added.item, types.UnknownItem)
    assert added.item.id == "item_x1"
    assert added.to_wire()["item"] == item


def test_unknown_content_part_is_kept_and_skipped_by_output_text() -> None:
    message = types.parse_item(
        {
            "id": "item_1",
            "type": "message",
            "turn_id": "t",
            "role": "assistant",
            "status": "completed",
            "content": [
                {"type": "output_text", "text": "a"},
                {"type": "output_audio", "transcript": "ignored"},
                {"type": "output_text", "text": "b"},
            ],
        }
    )
    assert isinstance(message, types.MessageItem)
    assert isinstance(message.content[1], types.UnknownContent)
    assert message.output_text == "ab"


def test_unknown_mcp_transport_keeps_its_data() -> None:
    payload = load("extra_fields")["new_transport"]["payload"]
    tool = TypeAdapter(types.Tool).validate_python(payload)
    assert isinstance(tool, types.McpTool)
    assert isinstance(tool.transport, types.UnknownMcpTransport)
    assert tool.transport.raw == payload["transport"]


def test_payload_without_type_is_rejected() -> None:
    with pytest.raises(ValidationError, match="type"):
        types.parse_event({"event_id": "evt_1"})


KNOWN_EVENT_TYPES = {types.parse_event(payload).type for payload in load("events").values()}
json_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=20)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=10,
)


@given(
    type_=st.text(min_size=1, max_size=40).filter(lambda t: t not in KNOWN_EVENT_TYPES),
    fields=st.dictionaries(
        st.text(min_size=1, max_size=12).filter(lambda k: k != "type"), json_values, max_size=5
    ),
)
def test_any_unknown_event_type_round_trips(type_: str, fields: dict[str, Any]) -> None:
    payload = {"type": type_, **fields}
    event = types.parse_event(payload)
    assert isinstance(event, types.UnknownEvent)
    assert event.raw == payload


# Function results: field presence.

TURN_ID = "8c7d6e5f-4a3b-4c2d-9e1f-0a1b2c3d4e5f"


def test_omitted_output_and_error_are_not_sent() -> None:
    event = types.ToolResultEvent(turn_id=TURN_ID, call_id="call_1", success=True)
    assert event.to_wire() == {
        "type": "agent.session.input.tool_result",
        "turn_id": TURN_ID,
        "call_id": "call_1",
        "success": True,
    }


def test_explicit_none_is_sent_as_null() -> None:
    event = types.ToolResultEvent(
        turn_id=TURN_ID, call_id="call_1", success=False, output=None, error="boom"
    )
    wire = event.to_wire()
    assert wire["output"] is None
    assert wire["error"] == "boom"
    assert json.loads(json.dumps(wire)) == wire


def test_output_parts_are_sent_with_their_types() -> None:
    event = types.ToolResultEvent(
        turn_id=TURN_ID,
        call_id="call_1",
        success=True,
        output=[
            types.InputText(text="see image"),
            types.InputImage(image_url="data:image/png;base64,iVBORw0KGgo="),
        ],
    )
    assert event.to_wire()["output"] == [
        {"type": "input_text", "text": "see image"},
        {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="},
    ]


def test_tool_result_rejects_unknown_output_part() -> None:
    with pytest.raises(ValidationError, match="output"):
        types.ToolResultEvent.from_wire(
            {
                "type": "agent.session.input.tool_result",
                "turn_id": TURN_ID,
                "call_id": "call_1",
                "success": True,
                "output": [{"type": "input_file", "file_id": "file_1"}],
            }
        )


output_parts = st.lists(
    st.builds(lambda text: {"type": "input_text", "text": text}, st.text(max_size=20))
    | st.builds(
        lambda data: {"type": "input_image", "image_url": f"data:image/png;base64,{data}"},
        st.text(
            alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=",
            max_size=16,
        ),
    ),
    max_size=4,
)
OMITTED = object()


@given(
    success=st.booleans(),
    call_id=st.text(min_size=1, max_size=20),
    output=st.just(OMITTED) | st.none() | st.text(max_size=30) | output_parts,
    error=st.just(OMITTED) | st.none() | st.text(max_size=30),
)
def test_tool_result_field_presence_round_trips(
    success: bool, call_id: str, output: object, error: object
) -> None:
    payload: dict[str, Any] = {
        "type": "agent.session.input.tool_result",
        "turn_id": TURN_ID,
        "call_id": call_id,
        "success": success,
    }
    if output is not OMITTED:
        payload["output"] = output
    if error is not OMITTED:
        payload["error"] = error

    event = types.ToolResultEvent.from_wire(payload)
    assert event.to_wire() == payload
    assert ("output" in event.model_fields_set) == (output is not OMITTED)
    assert ("error" in event.model_fields_set) == (error is not OMITTED)
    # Sent through the generic input-event parser, the same presence survives.
    assert types.parse_input_event(json.loads(json.dumps(payload))).to_wire() == payload


# Construction in code.


def test_constants_are_sent_even_when_left_at_their_default() -> None:
    assert types.InputCancelEvent().to_wire() == {"type": "agent.session.input.cancel"}
    assert types.InputMessageEvent.from_text("hi").to_wire() == {
        "type": "agent.session.input.message",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
    }
    assert types.UserMessage(content=[types.InputText(text="x")]).to_wire()["role"] == "user"


def test_tool_declarations_send_only_what_was_chosen() -> None:
    tools = [
        types.FunctionTool(
            name="lookup_order",
            description="Look up an order.",
            parameters={"type": "object", "properties": {}},
        ),
        types.WebSearchTool(mode="disabled"),
        types.ProgrammaticToolCallingTool(enabled=False),
        types.McpTool(
            server_label="tickets",
            transport=types.McpHttpTransport(server_url="https://mcp.example.com/mcp"),
        ),
    ]
    assert [tool.to_wire() for tool in tools] == [
        {
            "type": "function",
            "name": "lookup_order",
            "description": "Look up an order.",
            "parameters": {"type": "object", "properties": {}},
        },
        {"type": "web_search", "mode": "disabled"},
        {"type": "programmatic_tool_calling", "enabled": False},
        {
            "type": "mcp",
            "server_label": "tickets",
            "transport": {"type": "http", "server_url": "https://mcp.example.com/mcp"},
        },
    ]
    assert types.TextConfig(format=types.TextFormat.json_schema({"type": "object"})).to_wire() == {
        "format": {"type": "json_schema", "schema": {"type": "object"}}
    }


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"order_id": "A-1"}, {"order_id": "A-1"}),
        ('{"order_id": "A-1"}', {"order_id": "A-1"}),
        ("[]", []),
    ],
)
def test_function_arguments_decode_from_either_form(arguments: Any, expected: Any) -> None:
    action = types.FunctionCallAction(turn_id="t", call_id="c", name="f", arguments=arguments)
    assert action.decoded_arguments() == expected
    item = types.parse_item(
        {
            "id": "i",
            "type": "function_call",
            "turn_id": "t",
            "call_id": "c",
            "name": "f",
            "arguments": arguments,
            "status": "completed",
        }
    )
    assert isinstance(item, types.FunctionCallItem)
    assert item.decoded_arguments() == expected


def test_undecodable_string_arguments_name_the_field() -> None:
    action = types.FunctionCallAction(turn_id="t", call_id="c", name="f", arguments="{not json")
    with pytest.raises(ValueError, match="'arguments'"):
        action.decoded_arguments()


def test_union_fields_accept_models_built_in_code() -> None:
    payload = load("sessions")["idle_new"]
    action = types.FunctionCallAction(turn_id="t", call_id="c", name="f", arguments={})
    session = types.Session.model_validate(payload | {"required_actions": [action]})
    assert session.required_actions == [action]
    assert session.pending_function_calls == [action]


def test_every_event_class_has_its_wire_type_constant() -> None:
    for payload in load("events").values():
        event = types.parse_event(payload)
        assert not isinstance(event, types.UnknownEvent)
        assert event.type == type(event).TYPE
