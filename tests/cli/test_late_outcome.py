"""The late outcome of a function that finished after its timeout, as the operator sees
it from the command line (issue 12)."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest

from openagentcore import SQLiteResultStore
from openagentcore.cli import EXIT_OK, main
from openagentcore.store import CallKey, CallState

KEY = CallKey("sess_1", "turn_1", "call_late")
BASE = {"type": "agent.session.input.tool_result", "turn_id": "turn_1", "call_id": "call_late"}
TIMED_OUT = {**BASE, "success": False, "error": "The call timed out after 0.3 s."}
LATE = {**BASE, "success": True, "output": "exported late"}


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    """A store with one call that timed out, was submitted, and then finished late;
    and one ordinary call."""
    path = tmp_path / "calls.db"
    with SQLiteResultStore(path) as store:
        for key in (KEY, CallKey("sess_1", "turn_1", "call_on_time")):
            store.claim(
                key, function_name="export", arguments_hash="h", owner="far:1:a", lease_seconds=30
            )
            store.save_result(key, {**TIMED_OUT, "call_id": key.call_id}, owner=None)
            store.mark(key, CallState.SUBMITTED)
        store.keep_late_outcome(KEY, {**LATE, "output": "exported late \udc80"})
    return path


def _json_of(argv: list[str], capsys: pytest.CaptureFixture[str]) -> object:
    assert main([*argv, "--json"]) == EXIT_OK
    return json.loads(capsys.readouterr().out)


def test_calls_show_prints_the_late_outcome_beside_the_result_sent(
    store_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (shown,) = _json_of(["calls", "show", KEY.call_id, "--store", str(store_path)], capsys)  # type: ignore[misc]

    assert shown["result"] == TIMED_OUT
    assert shown["late_outcome"]["success"] is True
    assert shown["late_outcome"]["output"].startswith("exported late ")
    late_at = datetime.datetime.fromisoformat(shown["late_at"].replace("Z", "+00:00"))
    assert late_at.tzinfo is not None

    assert main(["calls", "show", KEY.call_id, "--store", str(store_path)]) == EXIT_OK
    text = capsys.readouterr().out
    assert "after timeout: succeeded: exported late " in text
    assert "not sent" in text


def test_calls_list_says_which_calls_finished_late(
    store_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    listed = _json_of(["calls", "list", "--store", str(store_path)], capsys)
    assert isinstance(listed, list)
    by_call = {record["call_id"]: record for record in listed}
    assert by_call["call_on_time"]["late_outcome"] is None
    assert by_call["call_on_time"]["late_at"] is None
    assert by_call[KEY.call_id]["late_outcome"]["success"] is True

    assert main(["calls", "list", "--store", str(store_path)]) == EXIT_OK
    lines = capsys.readouterr().out.splitlines()
    (late,) = [line for line in lines if KEY.call_id in line]
    (on_time,) = [line for line in lines if "call_on_time" in line]
    assert "finished after its timeout: succeeded" in late
    assert "after its timeout" not in on_time
