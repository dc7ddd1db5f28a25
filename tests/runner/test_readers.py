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
from openagentcore.store._records import owner_closed

MakeCore = Callable[..., LocalCore]

#: How long each reader still takes to end once ``close()`` lets it, in these tests.
SLOW_EXIT = 0.3


def _readers() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "openagentcore-stream"}


def test_run_turn_returns_without_waiting_for_its_reader_and_close_waits_for_it(
    make_core: MakeCore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each reader is held at its end until ``close()`` begins, so ``run_turn`` can only
    return while its reader is still there; then it takes a while more to end, and
    ``close()`` must have waited for it. No assertion depends on how fast anything runs."""
    may_end = threading.Event()
    ended: list[threading.Thread] = []
    original = _sync._Reader._run

    def held_at_its_end(reader: _sync._Reader) -> None:
        try:
            original(reader)
        except BaseException as exc:
            print("RAISED", repr(exc))
            raise
        may_end.wait(60)
        time.sleep(SLOW_EXIT)
        ended.append(threading.current_thread())

    closing = owner_closed

    def close_begins(owner: str) -> None:
        may_end.set()
        closing(owner)

    monkeypatch.setattr(_sync._Reader, "_run", held_at_its_end)
    monkeypatch.setattr(_sync, "owner_closed", close_begins)
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
        result = runner.run_turn(session_id, "add them", timeout=15)
        assert result.status == "completed"
        assert result.report.calls_run == 1
        assert not may_end.is_set(), "run_turn waited for its reader"
        assert not ended, "run_turn waited for its reader"
        waiting = _readers() - before
        assert waiting, "the readers should still be ending"
        runner.close()
        assert set(ended) >= waiting, "close() returned before its readers ended"
        assert _readers() - before == set()


def test_a_stream_that_opens_after_its_serve_ended_is_closed_at_once(
    make_core: MakeCore,
) -> None:
    """The serve ended (a timeout, say) while its reader was still opening the stream:
    the stream it gets must be closed, not followed for ever."""
    core = make_core(scenario=Scenario(turns=[TurnScript()]))
    with Client(api_key=core.api_key, base_url=core.base_url) as client:
        runner = FunctionRunner(client)
        session_id = client.sessions.create(agent={"model": "scripted"}, input="hello").id
        opening, may_open = threading.Event(), threading.Event()
        open_stream = client.sessions.events.stream

        def slow_open(session_id: str, **options: object) -> object:
            opening.set()
            may_open.wait(10)
            return open_stream(session_id)

        client.sessions.events.stream = slow_open  # type: ignore[method-assign,assignment]
        serve = runner._attach(session_id, "idle")
        reader = runner._reader(serve)
        try:
            with reader:
                assert opening.wait(10)
            may_open.set()
            reader._thread.join(5)
            assert not reader._thread.is_alive(), "the reader follows a stream nobody needs"
        finally:
            may_open.set()
            runner._detach(serve)
            runner.close()
