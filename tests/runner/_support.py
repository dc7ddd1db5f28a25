"""Helpers for the runner tests: reading back what the server applied."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from openagentcore import Client
from openagentcore.local import FunctionCall, Scenario, TurnScript
from openagentcore.types import FunctionCallItem, FunctionCallOutputItem


@dataclass(frozen=True)
class AppliedCall:
    """One function call of a Session and the output Item the server applied for it."""

    call: FunctionCallItem
    output: FunctionCallOutputItem | None

    @property
    def arguments(self) -> Any:
        return self.call.decoded_arguments()


def applied_calls(client: Client, session_id: str) -> dict[str, AppliedCall]:
    """Every ``function_call`` Item of the Session by call ID, with its output Item."""
    items = list(client.sessions.items.list(session_id, order="asc"))
    outputs = {item.call_id: item for item in items if isinstance(item, FunctionCallOutputItem)}
    duplicated = [
        call_id
        for call_id in outputs
        if sum(isinstance(i, FunctionCallOutputItem) and i.call_id == call_id for i in items) > 1
    ]
    assert not duplicated, f"calls with more than one output Item: {duplicated}"
    return {
        item.call_id: AppliedCall(item, outputs.get(item.call_id))
        for item in items
        if isinstance(item, FunctionCallItem)
    }


def one_turn(*steps: Sequence[FunctionCall], answer: str = "{summary}") -> Scenario:
    """A scenario whose first Turn runs ``steps`` (each a round of parallel calls)."""
    return Scenario(turns=[TurnScript(steps=[tuple(step) for step in steps], answer=answer)])
