"""The scripted model, scenarios and the JSON Schema example generator."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from openagentcore.local import FunctionCall, LocalCore, Scenario, TurnScript, example_for_schema

from ._support import FUNCTION_TOOLS, Api, message_event


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ({"type": "string"}, "example value"),
        ({"type": "string", "format": "date"}, "2026-01-01"),
        ({"type": "string", "maxLength": 3}, "exa"),
        ({"type": "string", "minLength": 20}, "example value" + "x" * 7),
        ({"type": "integer", "minimum": 5}, 5),
        ({"type": "integer", "exclusiveMaximum": 0}, -1),
        ({"type": "number", "maximum": 0.25}, 0.25),
        ({"type": "boolean"}, True),
        ({"type": ["null", "integer"]}, 1),
        ({"enum": ["b", "a"]}, "b"),
        ({"const": 7}, 7),
        ({"type": "string", "default": "d"}, "d"),
        ({"type": "array", "items": {"type": "integer"}, "minItems": 2}, [1, 1]),
        ({"anyOf": [{"type": "null"}, {"type": "boolean"}]}, True),
        ({"oneOf": [{"type": "integer"}, {"type": "string"}]}, 1),
        (
            {
                "allOf": [
                    {"type": "object", "properties": {"a": {"type": "integer"}}},
                    {"properties": {"b": {}}},
                ]
            },
            {"a": 1, "b": "b"},
        ),
    ],
)
def test_examples_for_common_schema(schema: dict[str, Any], expected: object) -> None:
    assert example_for_schema(schema) == expected


def test_examples_follow_refs_and_nest() -> None:
    schema = {
        "type": "object",
        "properties": {
            "owner": {"$ref": "#/$defs/person"},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["owner"],
        "$defs": {
            "person": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
            }
        },
    }
    assert example_for_schema(schema) == {
        "owner": {"name": "example name", "age": 1},
        "tags": ["example tags"],
    }


def test_recursive_refs_terminate() -> None:
    schema = {
        "$ref": "#/$defs/node",
        "$defs": {"node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}}}},
    }
    value = example_for_schema(schema)
    depth = 0
    while isinstance(value, dict) and value.get("next") is not None:
        value, depth = value["next"], depth + 1
    assert 0 < depth < 20


def test_scenario_from_yaml_and_json(tmp_path: Path) -> None:
    yaml_file = tmp_path / "s.yaml"
    yaml_file.write_text(
        "turns:\n"
        "  - steps:\n"
        "      - - name: add\n"
        "          arguments: {a: 2, b: 3}\n"
        "        - name: lookup\n"
        "    answer: 'sum is {add}'\n",
        encoding="utf-8",
    )
    expected = Scenario(
        turns=(
            TurnScript(
                steps=((FunctionCall("add", {"a": 2, "b": 3}), FunctionCall("lookup")),),
                answer="sum is {add}",
            ),
        )
    )
    assert Scenario.from_file(yaml_file) == expected
    json_file = tmp_path / "s.json"
    json_file.write_text(
        json.dumps(
            {
                "turns": [
                    {
                        "steps": [
                            [{"name": "add", "arguments": {"a": 2, "b": 3}}, {"name": "lookup"}]
                        ],
                        "answer": "sum is {add}",
                    }
                ]
            }
        ),
        encoding="utf-8",
    )
    assert Scenario.from_file(json_file) == expected


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"turns": {}}, "must be a list"),
        ({"turns": [{"steps": [{"arguments": {}}]}]}, "turns\\[0\\].steps\\[0\\]"),
        ({"turns": [{"answer": 5}]}, "answer must be a string"),
    ],
)
def test_bad_scenarios_name_the_field(data: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        Scenario.from_dict(data)


def test_scripted_turns_run_steps_in_order_then_fall_back_to_the_default(make_core: Any) -> None:
    scenario = Scenario(
        turns=[
            TurnScript(
                steps=[
                    [FunctionCall("add", {"a": 2, "b": 3})],
                    [FunctionCall("lookup", {"word": "five"})],
                ],
                answer="{add} then {lookup}; {summary} {unknown}",
            ),
            TurnScript(answer=lambda outcomes: f"{len(outcomes)} outcomes"),
        ]
    )
    core: LocalCore = make_core(scenario=scenario)
    api = Api(core)
    session = api.create_session(tools=FUNCTION_TOOLS)
    seen: list[list[tuple[str, object]]] = []

    def answer(action: dict[str, Any]) -> str:
        seen.append([(action["name"], action["arguments"])])
        return "5" if action["name"] == "add" else "V"

    api.run_turn_with_results(session["id"], answer)
    assert seen == [[("add", {"a": 2, "b": 3})], [("lookup", {"word": "five"})]]
    text = api.items(session["id"])[-1]["content"][0]["text"]
    assert text == "5 then V; Results: add: 5; lookup: V. {unknown}"

    api.post_events(session["id"], [message_event("second")])
    api.wait_status(session["id"], "idle")
    assert api.items(session["id"])[-1]["content"][0]["text"] == "0 outcomes"

    # Past the script: the default calls every declared function at once.
    api.post_events(session["id"], [message_event("third")])
    actions = api.wait_status(session["id"], "requires_action")["required_actions"]
    assert [a["name"] for a in actions] == ["add", "lookup"]
    api.close()
