"""The SQLite state file: stop the server, start it again, carry on."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

from openagentcore.local import LocalCore

from ._support import FUNCTION_TOOLS, Api, message_event, result_event


def test_restart_keeps_sessions_pending_calls_and_results(
    make_core: Callable[..., LocalCore], tmp_path: Path
) -> None:
    state = tmp_path / "state.sqlite"
    first = make_core(state=state, api_key="sk-test")
    api = Api(first)
    agent = api.http.post("/agents", json={"model": "m"}).json()
    session = api.create_session(tools=FUNCTION_TOOLS)
    actions = api.wait_status(session["id"], "requires_action")["required_actions"]
    submitted = result_event(actions[0], "2")
    assert api.post_events(session["id"], [submitted], key="k").status_code == 202
    api.wait_status(session["id"], "requires_action")
    before = api.session(session["id"])
    items_before = api.items(session["id"])
    api.close()
    first.stop()

    second = make_core(state=state, api_key="sk-test")
    api = Api(second)
    assert api.http.get(f"/agents/{agent['id']}").status_code == 200
    assert api.session(session["id"]) == before
    assert api.items(session["id"]) == items_before
    assert second.stored_results(session["id"]) == {actions[0]["call_id"]: submitted}
    # Retry identity and result identity survive too.
    assert api.post_events(session["id"], [submitted], key="k").status_code == 202
    assert api.post_events(session["id"], [{**submitted, "output": "3"}]).status_code == 409
    assert api.post_events(session["id"], [result_event(actions[1], "w")]).status_code == 202
    api.wait_status(session["id"], "idle")
    assert api.items(session["id"])[-1]["content"][0]["text"] == "Results: add: 2; lookup: w."
    api.post_events(session["id"], [message_event("again")])
    assert api.wait_status(session["id"], "requires_action")["required_actions"]
    api.close()


def test_a_result_admitted_just_before_stop_is_applied_after_restart(
    make_core: Callable[..., LocalCore], tmp_path: Path
) -> None:
    state = tmp_path / "state.sqlite"
    first = make_core(state=state, api_key="sk-test")
    api = Api(first)
    session = api.create_session(tools=FUNCTION_TOOLS[:1])
    action = api.wait_status(session["id"], "requires_action")["required_actions"][0]
    api.close()
    first.stop()
    # Simulate a crash between admission and application: store the result by hand.
    with sqlite3.connect(state) as db:
        (body,) = db.execute("SELECT body FROM records WHERE kind = 'call'").fetchone()
        db.execute(
            "UPDATE records SET body = ? WHERE kind = 'call'",
            (body.replace('"result": null', f'"result": {json.dumps(result_event(action, "2"))}'),),
        )
    second = make_core(state=state, api_key="sk-test")
    api = Api(second)
    assert api.wait_status(session["id"], "idle")["status"] == "idle"
    assert api.items(session["id"])[-1]["content"][0]["text"] == "Results: add: 2."
    api.close()
