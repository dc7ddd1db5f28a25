"""A serve's stream reader ends in the background; ``close()`` waits for it.

``serve`` and ``run_turn`` return without joining their reader's thread (joining cost
about 0.3 ms a Turn): whatever the reader still delivers is for a serve that ended,
which the core ignores. ``close()`` joins the readers that are still ending.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from openagentcore import Client, FunctionRunner
from openagentcore.local import FunctionCall, LocalCore, Scenario, TurnScript
from openagentcore.runner import _sync

MakeCore = Callable[..., LocalCore]

#: How long each reader takes to end once its stream is closed, in these tests.
SLOW_EXIT = 2.0


def _readers() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "openagentcore-stream"}


def test_run_turn_returns_without_waiting_for_its_reader_and_close_waits_for_it(
    make_core: MakeCore, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = _sync._Reader._run

    def slow_to_end(reader: _sync._Reader) -> None:
        original(reader)
        time.sleep(SLOW_EXIT)

    monkeypatch.setattr(_sync._Reader, "_run", slow_to_end)
    scenario = Scenario(
        turns=[TurnScript(), TurnScript(steps=[[FunctionCall("add", {"a": 1, "b": 2})]])]
    )
    core = make_core(scenario=scenario)
    before = _readers()
    with Client(api_key=core.api_key, base_url=core.base_url) as client:
        runner = FunctionRunner(client)

        @runner.function
        def add(a: int, b: int) -> int:
            """Add two integers."""
            return a + b

        spec = {"model": "scripted", "tools": runner.tools}
        session_id = client.sessions.create(agent=spec, input="hello").id
        runner.serve(session_id, timeout=15)  # the first Turn calls nothing
        started = time.monotonic()
        result = runner.run_turn(session_id, "add them", timeout=15)
        took = time.monotonic() - started
        assert result.status == "completed"
        assert result.report.calls_run == 1
        assert took < SLOW_EXIT / 2, f"run_turn waited {took:.2f} s for its reader"
        assert _readers() - before, "the readers should still be ending"
        runner.close()
        assert _readers() - before == set()
