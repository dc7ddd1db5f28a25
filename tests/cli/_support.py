"""Helpers for the CLI tests: a Session waiting on one call, and a saved result for it."""

from __future__ import annotations

import time
from pathlib import Path

from openagentcore import Client, SQLiteResultStore
from openagentcore.store import CallKey, arguments_hash, new_owner_id
from openagentcore.types import FunctionCallAction

TOOL = {
    "type": "function",
    "name": "refund",
    "description": "Refund an order.",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
}


def pending_call(client: Client, session_id: str) -> FunctionCallAction:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        session = client.sessions.retrieve(session_id)
        for action in session.required_actions:
            if isinstance(action, FunctionCallAction):
                return action
        time.sleep(0.02)
    raise AssertionError("the Session never asked for the function call")


def save_result(store_path: Path, session_id: str, action: FunctionCallAction) -> CallKey:
    key = CallKey(session_id, action.turn_id, action.call_id)
    store = SQLiteResultStore(store_path)
    claim = store.claim(
        key,
        function_name=action.name,
        arguments_hash=arguments_hash(action.arguments),
        owner=new_owner_id(),
        lease_seconds=30,
    )
    assert claim.won
    event = {
        "type": "agent.session.input.tool_result",
        "turn_id": key.turn_id,
        "call_id": key.call_id,
        "success": True,
        "output": "refunded",
    }
    store.save_result(key, event, owner=None)
    store.close()
    return key
