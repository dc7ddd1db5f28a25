"""How the emulator writes a Session's event stream: one write per burst of events."""

from __future__ import annotations

from typing import Any

import pytest

from openagentcore.local import Faults
from openagentcore.local._app import _App
from openagentcore.local._engine import Engine, Subscriber
from openagentcore.local._engine import sse_frame as _sse_frame
from openagentcore.local._model import ScriptedModel
from openagentcore.local._store import Store

pytestmark = pytest.mark.anyio


def _app(faults: Faults) -> tuple[_App, Engine]:
    engine = Engine(Store(), ScriptedModel(), faults)
    return _App(engine, api_key="test-key", keepalive_interval=5.0), engine


def _event(number: int, kind: str = "agent.session.in_progress") -> dict[str, Any]:
    return {"type": kind, "session_id": "sess_writes", "number": number}


async def _writes(app: _App, subscriber: Subscriber) -> list[str]:
    return [chunk async for chunk in app._event_stream(subscriber)]


async def test_events_queued_together_go_out_in_one_write() -> None:
    """A burst is one system call, and a client gone mid-burst is written to once."""
    app, engine = _app(Faults())
    subscriber = engine.subscribe("sess_writes")
    events = [engine._emit("sess_writes", _event(n)) for n in range(3)]
    subscriber.close()

    writes = await _writes(app, subscriber)

    assert writes == [": connected\n\n", "".join(_sse_frame(event) for event in events)]


async def test_faults_still_count_single_events_within_a_burst() -> None:
    """duplicate_every and close_stream_after apply per event, not per write."""
    app, engine = _app(Faults(duplicate_every=2, close_stream_after=3))
    subscriber = engine.subscribe("sess_writes")
    events = [engine._emit("sess_writes", _event(n)) for n in range(5)]

    writes = await _writes(app, subscriber)

    first, second, third = (_sse_frame(event) for event in events[:3])
    assert writes == [": connected\n\n", first + second + second + third]


async def test_a_stream_that_ends_on_idle_keeps_the_events_before_it() -> None:
    app, engine = _app(Faults())
    subscriber = engine.subscribe("sess_writes", until_idle=True)
    events = [
        engine._emit("sess_writes", event)
        for event in (_event(0), _event(1, "agent.session.idle"), _event(2))
    ]

    writes = await _writes(app, subscriber)

    assert writes == [": connected\n\n", _sse_frame(events[0]) + _sse_frame(events[1])]


async def test_an_overflowed_stream_ends_with_the_interruption_error() -> None:
    app, engine = _app(Faults(stream_buffer=2))
    subscriber = engine.subscribe("sess_writes")
    for number in range(3):  # one more than the buffer holds
        engine._emit("sess_writes", _event(number))

    writes = await _writes(app, subscriber)

    assert len(writes) == 2
    assert writes[1].startswith("event: error\n")
    assert "stream_interrupted" in writes[1]
