"""The runner through the application-receipt window: a result admitted (202) but not
yet applied keeps its call in ``required_actions`` (message-content.md, "Application
receipts"). Serving and recovery in that window must resubmit the saved result, never
run the function again, and the result must be accepted once."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from openagentcore import Client
from openagentcore.local import Faults, FunctionCall, LocalCore
from openagentcore.runner import FunctionRunner
from openagentcore.store import MemoryResultStore

from ._support import applied_calls, one_turn

MakeCore = Callable[..., LocalCore]
ADD_TOOL = {
    "type": "function",
    "name": "add",
    "description": "Add two integers.",
    "parameters": {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    },
}


class _Runs:
    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def add(self, a: int, b: int) -> int:
        """Add two integers."""
        with self._lock:
            self.count += 1
        return a + b


def _session(client: Client) -> str:
    return client.sessions.create(input="add them", agent={"tools": [ADD_TOOL]}).id


def _assert_applied_once(client: Client, session_id: str, runs: _Runs) -> None:
    assert runs.count == 1
    calls = list(applied_calls(client, session_id).values())
    assert len(calls) == 1
    assert calls[0].output is not None
    assert calls[0].output.output == "5"
    assert client.sessions.retrieve(session_id).status == "idle"


def test_serve_waits_out_the_receipt_window(make_core: MakeCore) -> None:
    core = make_core(
        scenario=one_turn([FunctionCall("add", {"a": 2, "b": 3})]),
        faults=Faults(receipt_delay=0.5),
    )
    runs = _Runs()
    with Client(base_url=core.base_url, api_key=core.api_key) as client:
        runner = FunctionRunner(client, store=MemoryResultStore(), poll_interval=0.1)
        runner.function(runs.add)
        session_id = _session(client)

        report = runner.serve(session_id, timeout=30)

        assert report.calls_run == 1
        assert (report.rejected, report.conflicts, report.in_doubt) == ([], [], [])
        _assert_applied_once(client, session_id, runs)


def test_recovery_inside_the_window_resubmits_instead_of_running_again(
    make_core: MakeCore,
) -> None:
    """A worker stops while its result waits for the receipt; another worker's recover()
    sees the call still pending, finds the saved result and sends it again (an identical
    retry the server accepts without applying it twice)."""
    core = make_core(
        scenario=one_turn([FunctionCall("add", {"a": 2, "b": 3})]),
        faults=Faults(receipt_delay=4.0),
    )
    runs = _Runs()
    store = MemoryResultStore()
    with Client(base_url=core.base_url, api_key=core.api_key) as client:
        first = FunctionRunner(client, store=store, poll_interval=0.1)
        first.function(runs.add)
        session_id = _session(client)
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            first.serve(session_id, timeout=1.0)  # the receipt comes after 4 s
        in_window = client.sessions.retrieve(session_id)
        assert in_window.status == "requires_action", "the receipt came early"
        assert runs.count == 1

        second = FunctionRunner(client, store=store, poll_interval=0.1)
        second.function(runs.add)
        report = second.recover(session_id)
        assert time.monotonic() - started < 4.0, "recovery ran after the window"

        assert report.calls_run == 0
        assert report.results_resubmitted == 1
        assert (report.rejected, report.conflicts, report.in_doubt) == ([], [], [])
        deadline = time.monotonic() + 30
        while client.sessions.retrieve(session_id).status != "idle":
            assert time.monotonic() < deadline, "the result was never applied"
            time.sleep(0.05)
        _assert_applied_once(client, session_id, runs)
