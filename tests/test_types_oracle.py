"""Wire-oracle tests: the corpus parses with our models and with openai 3.51's types.

Each payload in ``tests/corpus`` is hand-written from the contract. It must parse into
the expected (never ``Unknown*``) class with no field left over as an extra, and both
our dump and the official dump must give back the payload unchanged. Where the contract
and the official types legitimately disagree, the difference is asserted and explained.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai.types.beta import Agent as OfficialAgent
from openai.types.beta import AgentDeleted as OfficialAgentDeleted
from openai.types.beta import AgentSession as OfficialSession
from openai.types.beta import AgentSessionDeleted as OfficialSessionDeleted
from openai.types.beta.agent_session import RequiredAction as OfficialRequiredAction
from openai.types.beta.agent_session_event import AgentSessionEvent as OfficialEvent
from openai.types.beta.agent_session_input_param import AgentSessionInputParam
from openai.types.beta.agent_session_item import AgentSessionItem as OfficialItem
from openai.types.beta.agents.sessions.turn import Turn as OfficialTurn
from pydantic import BaseModel, TypeAdapter, ValidationError

from openagentcore import types
from openagentcore.types import UnknownModel, WireModel

CORPUS = Path(__file__).parent / "corpus"


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CORPUS / f"{name}.json").read_text())
    return data


def cases(name: str) -> list[Any]:
    return [pytest.param(payload, id=case) for case, payload in load(name).items()]


def official_dump(value: BaseModel) -> dict[str, Any]:
    return value.model_dump(mode="json", by_alias=True, exclude_unset=True)


def walk(value: object, path: str = "$") -> Iterator[tuple[str, WireModel]]:
    """Every wire model inside ``value``, with its JSON path."""
    if isinstance(value, WireModel):
        yield path, value
        for name in type(value).model_fields:
            yield from walk(getattr(value, name), f"{path}.{name}")
    elif isinstance(value, list):
        for index, element in enumerate(value):
            yield from walk(element, f"{path}[{index}]")
    elif isinstance(value, dict):
        for key, element in value.items():
            yield from walk(element, f"{path}.{key}")


def assert_fully_typed(value: WireModel) -> None:
    """No part of a known payload fell back to ``Unknown*`` or landed in extras."""
    for path, model in walk(value):
        assert not isinstance(model, UnknownModel), f"{path} parsed as {type(model).__name__}"
        assert not model.model_extra, f"{path} has undeclared fields {sorted(model.model_extra)}"


def check_against_oracle(ours: WireModel, official: BaseModel, payload: dict[str, Any]) -> None:
    assert_fully_typed(ours)
    assert ours.to_wire() == payload
    assert official_dump(official) == payload


@pytest.mark.parametrize("payload", cases("sessions"))
def test_session_matches_official(payload: dict[str, Any]) -> None:
    ours = types.Session.model_validate(payload)
    check_against_oracle(ours, OfficialSession.model_validate(payload), payload)
    assert ours.status == payload["status"]


@pytest.mark.parametrize("payload", cases("agents"))
def test_agent_matches_official(payload: dict[str, Any]) -> None:
    ours = types.Agent.model_validate(payload)
    check_against_oracle(ours, OfficialAgent.model_validate(payload), payload)


def test_deleted_confirmations_match_official() -> None:
    deleted = load("deleted")
    agent = types.AgentDeleted.model_validate(deleted["agent"])
    check_against_oracle(
        agent, OfficialAgentDeleted.model_validate(deleted["agent"]), deleted["agent"]
    )
    session = types.SessionDeleted.model_validate(deleted["session"])
    official = OfficialSessionDeleted.model_validate(deleted["session"])
    check_against_oracle(session, official, deleted["session"])


@pytest.mark.parametrize("payload", cases("turns"))
def test_turn_matches_official(payload: dict[str, Any]) -> None:
    ours = types.Turn.model_validate(payload)
    check_against_oracle(ours, OfficialTurn.model_validate(payload), payload)
    assert ours.is_terminal == (payload["status"] in {"completed", "failed", "cancelled"})


official_item = TypeAdapter[Any](OfficialItem)
official_event = TypeAdapter[Any](OfficialEvent)
official_action = TypeAdapter[Any](OfficialRequiredAction)


@pytest.mark.parametrize("payload", cases("items"))
def test_item_matches_official(payload: dict[str, Any]) -> None:
    ours = types.parse_item(payload)
    assert ours.type == payload["type"]
    check_against_oracle(ours, official_item.validate_python(payload), payload)


@pytest.mark.parametrize("payload", cases("required_actions"))
def test_required_action_matches_official(payload: dict[str, Any]) -> None:
    ours = types.parse_required_action(payload)
    assert ours.type == payload["type"]
    check_against_oracle(ours, official_action.validate_python(payload), payload)


@pytest.mark.parametrize("payload", cases("events"))
def test_event_matches_official(payload: dict[str, Any]) -> None:
    ours = types.parse_event(payload)
    assert ours.type == payload["type"]
    check_against_oracle(ours, official_event.validate_python(payload), payload)


PAGE_ELEMENTS: dict[str, tuple[TypeAdapter[Any], TypeAdapter[Any]]] = {
    "items": (types.item_adapter, official_item),
    "turns": (TypeAdapter(types.Turn), TypeAdapter(OfficialTurn)),
    "sessions": (TypeAdapter(types.Session), TypeAdapter(OfficialSession)),
    "agents": (TypeAdapter(types.Agent), TypeAdapter(OfficialAgent)),
    "empty": (types.item_adapter, official_item),
}


@pytest.mark.parametrize("name", sorted(PAGE_ELEMENTS))
def test_list_page_elements_match_official(name: str) -> None:
    page = load("pages")[name]
    assert page["object"] == "list"
    assert isinstance(page["has_more"], bool)
    assert (page["first_id"] is None) == (page["data"] == [])
    ours_adapter, official_adapter = PAGE_ELEMENTS[name]
    for element in page["data"]:
        check_against_oracle(
            ours_adapter.validate_python(element),
            official_adapter.validate_python(element),
            element,
        )


official_input = TypeAdapter[Any](AgentSessionInputParam)


@pytest.mark.parametrize("payload", cases("input_events"))
def test_input_event_round_trips_and_is_valid_for_official_params(payload: dict[str, Any]) -> None:
    ours = types.parse_input_event(payload)
    assert_fully_typed(ours)
    assert ours.to_wire() == payload
    official_input.validate_python(payload)


def union_types(union: Any) -> set[str]:
    """The ``type`` literals of every member of an official discriminated union."""
    members = typing.get_args(typing.get_args(union)[0])
    return {typing.get_args(member.model_fields["type"].annotation)[0] for member in members}


def parsed_types(corpus: str, parse: Any) -> set[str]:
    return {parse(payload).TYPE for payload in load(corpus).values()}


def test_corpus_covers_every_official_event_type() -> None:
    assert parsed_types("events", types.parse_event) == union_types(OfficialEvent)


def test_corpus_covers_every_contract_item_type() -> None:
    assert parsed_types("items", types.parse_item) == {
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
        "agent_message",
        "mcp_call",
        "web_search_call",
        "command_execution",
        "create_subagent_call",
        "send_subagent_input_call",
        "resume_subagent_call",
        "wait_for_subagents_call",
        "interrupt_subagent_call",
        "close_subagent_call",
    }


def test_item_union_is_the_contract_one_not_the_newer_official_one() -> None:
    # The contract pins the Items union without the computer-use Items that openai 3.51
    # added; OpenAgentCore never sends them. They parse as UnknownItem here.
    ours = parsed_types("items", types.parse_item)
    assert union_types(OfficialItem) - ours == {
        "computer_use_call",
        "computer_use_approval_request",
        "computer_use_approval_request_result",
    }


def test_corpus_covers_every_official_required_action_type() -> None:
    assert parsed_types("required_actions", types.parse_required_action) == union_types(
        OfficialRequiredAction
    )


def test_self_hosted_environment_needs_only_its_type_per_contract() -> None:
    # The contract requires only `type` on a Session's environment; the official types
    # also require id, remote_url, workspace_directory and capability_directories on
    # self_hosted. We follow the contract and accept the minimal form.
    payload = load("sessions")["idle_new"] | {"environment": {"type": "self_hosted"}}
    assert types.Session.model_validate(payload).environment.type == "self_hosted"
    with pytest.raises(ValidationError):
        OfficialSession.model_validate(payload)


def test_stream_interrupted_error_has_no_param_and_both_sides_accept_it() -> None:
    payload = load("events")["error_stream_interrupted"]
    assert "param" not in payload["error"]
    ours = types.parse_event(payload)
    assert isinstance(ours, types.ErrorEvent)
    assert ours.error.code == "stream_interrupted"
    assert "param" not in ours.to_wire()["error"]
