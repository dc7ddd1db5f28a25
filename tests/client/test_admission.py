"""Declarations that the server would refuse fail locally, before any request."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import respx

from openagentcore._errors import AdmissionError
from openagentcore.types import FunctionTool

from ._support import AnyClient, resolve

pytestmark = pytest.mark.anyio

LOOKUP = {
    "type": "function",
    "name": "lookup_order",
    "description": "Look up an order by its number.",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
}
TWICE = [LOOKUP, FunctionTool.model_validate(LOOKUP)]
NO_SCHEMA = {"format": {"type": "json_schema"}}

CALLS: dict[str, Callable[[Any], Any]] = {
    "sessions.create agent.tools": lambda c: c.sessions.create(
        agent={"model": "kimi-k3", "tools": TWICE}
    ),
    "sessions.create agent.text": lambda c: c.sessions.create(
        agent={"model": "kimi-k3", "text": NO_SCHEMA}
    ),
    "sessions.create stream=True": lambda c: c.sessions.create(
        agent={"model": "kimi-k3", "tools": TWICE}, stream=True
    ),
    "agents.create tools": lambda c: c.agents.create(model="kimi-k3", tools=TWICE),
    "agents.create text": lambda c: c.agents.create(model="kimi-k3", text=NO_SCHEMA),
    "agents.update tools": lambda c: c.agents.update("ag_1", tools=TWICE),
}


@pytest.mark.parametrize("call", CALLS.values(), ids=CALLS.keys())
async def test_refused_declaration_sends_nothing(
    client: AnyClient, api: respx.MockRouter, call: Callable[[Any], Any]
) -> None:
    with pytest.raises(AdmissionError) as caught:
        await resolve(call(client))

    assert not api.calls
    assert caught.value.field is not None
    assert caught.value.field in str(caught.value)


async def test_duplicate_function_name_names_the_tool_and_field(
    client: AnyClient, api: respx.MockRouter
) -> None:
    with pytest.raises(AdmissionError, match="give each function a unique name") as caught:
        await resolve(client.sessions.create(agent={"model": "kimi-k3", "tools": TWICE}))

    assert caught.value.tool == "lookup_order"
    assert caught.value.field == "tools[1].name"
    assert caught.value.code == "invalid_request_error"
    assert not api.calls
