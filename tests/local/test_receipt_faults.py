"""Item 9: the application-receipt window, where a result is admitted but not applied
(message-content.md, "Application receipts"), as a fault."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from openagentcore.local import Faults, LocalCore
from openagentcore.local._faults import parse_fault

from ._support import FUNCTION_TOOLS, Api, result_event


def _outputs(api: Api, session_id: str) -> list[dict[str, object]]:
    return [item for item in api.items(session_id) if item["type"] == "function_call_output"]


def test_an_admitted_result_waits_for_its_receipt(make_core: Callable[..., LocalCore]) -> None:
    """message-content.md, "Application receipts": a 202 does not mean the harness used
    the result; the pending call clears only when the application is confirmed.
    execution-tools.md, "Functions": an identical retry is accepted, a different one
    conflicts."""
    api = Api(make_core(faults=Faults(receipt_delay=0.6)))
    try:
        session = api.create_session(tools=FUNCTION_TOOLS[:1])
        action = api.wait_status(session["id"], "requires_action")["required_actions"][0]
        result = result_event(action, "3")

        admitted = time.monotonic()
        assert api.post_events(session["id"], [result]).status_code == 202
        window = api.session(session["id"])
        in_window = time.monotonic() - admitted < 0.6
        retry = api.post_events(session["id"], [result])
        other = api.post_events(session["id"], [result_event(action, "4")])

        if in_window:  # a heavily loaded machine may read it only after the receipt
            assert window["status"] == "requires_action"
            assert [a["call_id"] for a in window["required_actions"]] == [action["call_id"]]
        assert retry.status_code == 202
        assert other.status_code == 409
        api.wait_status(session["id"], "idle")
        assert time.monotonic() - admitted >= 0.6
        outputs = _outputs(api, session["id"])
        assert [(o["call_id"], o["output"]) for o in outputs] == [(action["call_id"], "3")]
    finally:
        api.close()


def test_a_receipt_that_never_comes_fails_the_turn(make_core: Callable[..., LocalCore]) -> None:
    """message-content.md, "Application receipts": the adapter waits for a receipt only
    so long; a timeout leaves application uncertain and ends the execution, with no
    replay. The stored result stays: an identical retry is still accepted."""
    api = Api(make_core(faults=Faults(receipt_delay=60, receipt_deadline=0.3)))
    try:
        session = api.create_session(tools=FUNCTION_TOOLS[:1])
        action = api.wait_status(session["id"], "requires_action")["required_actions"][0]
        result = result_event(action, "3")
        assert api.post_events(session["id"], [result]).status_code == 202

        failed = api.wait_status(session["id"], "failed")

        assert failed["required_actions"] == []
        turns = api.http.get(f"/agents/sessions/{session['id']}/turns").json()["data"]
        assert turns[0]["status"] == "failed"
        assert _outputs(api, session["id"]) == []
        assert api.post_events(session["id"], [result]).status_code == 202
        assert api.post_events(session["id"], [result_event(action, "4")]).status_code == 409
    finally:
        api.close()


def test_receipt_faults_from_the_command_line() -> None:
    faults = parse_fault("receipt_delay=0.5", parse_fault("receipt-deadline=2", Faults()))
    assert (faults.receipt_delay, faults.receipt_deadline) == (0.5, 2.0)
    with pytest.raises(ValueError, match="receipt_delay"):
        Faults(receipt_delay=-1)
