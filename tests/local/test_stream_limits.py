"""Item 4 (and the keepalive of item 8): the live stream's buffer, byte cap, blocked
writes and keepalives, as sessions-events.md "Live event stream" states them."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

import pytest

from openagentcore.local import Faults, LocalCore, Scenario, TurnScript
from openagentcore.local import _app as app_module
from openagentcore.local._engine import Published, SessionLog, Subscriber, sse_frame

from ._support import Api, EventReader, message_event

pytestmark = pytest.mark.anyio


def test_a_reader_that_keeps_reading_gets_a_long_answer_whole(
    make_core: Callable[..., LocalCore],
) -> None:
    """sessions-events.md, "Live event stream": only a reader that falls behind the
    buffer (256 events) is interrupted; a 900-word answer (300 deltas) reaches a reader
    that keeps reading, byte for byte."""
    answer = " ".join(f"word{index}" for index in range(900))
    api = Api(make_core(scenario=Scenario(turns=[TurnScript(answer=answer)])))
    try:
        body = {"environment": {"type": "none"}, "input": "go", "stream": True}
        request = api.http.build_request("POST", "/agents/sessions", json=body)
        reader = EventReader(api, response=api.http.send(request, stream=True))
        done = reader.wait_for("agent.session.turn.output_text.done", timeout=10)
        reader.wait_closed()

        assert done["text"] == answer
        deltas = [
            e["delta"] for e in reader.events if e["type"] == "agent.session.turn.output_text.delta"
        ]
        assert len(deltas) == 300
        assert "".join(deltas) == answer
        assert reader.types()[-1] == "agent.session.idle"
        reader.close()
    finally:
        api.close()


def _log_and_reader(max_events: int, max_bytes: int) -> tuple[SessionLog, Subscriber]:
    log = SessionLog(max_events, max_bytes)
    reader = Subscriber(log, "sess_limits")
    log.readers.add(reader)
    return log, reader


def _publish(log: SessionLog, number: int, padding: int = 0) -> Published:
    event: dict[str, Any] = {"type": "agent.session.in_progress", "n": number, "pad": "x" * padding}
    published = Published(event, sse_frame(event))
    log.append(published)
    return published


async def test_the_buffer_counts_bytes_as_well_as_events() -> None:
    """sessions-events.md, "Live event stream": at most 256 events and 64 MiB are
    kept; a reader whose next event was dropped for bytes falls behind."""
    first = _publish(SessionLog(256, 1), 0)
    log, reader = _log_and_reader(256, 3 * len(first.frame))
    for number in range(4):  # four frames of the same size, room for three
        _publish(log, number)

    assert await reader.next(1) is None
    assert reader.overflowed


async def test_one_event_larger_than_the_byte_cap_is_still_kept() -> None:
    """sessions-events.md, "Live event stream": plus one larger event when needed."""
    log, reader = _log_and_reader(256, 100)
    big = _publish(log, 0, padding=10_000)

    assert await reader.next(1) == big
    assert not reader.overflowed


async def test_a_reader_that_keeps_up_is_never_behind() -> None:
    log, reader = _log_and_reader(2, 10_000)
    for number in range(10):
        published = _publish(log, number)
        assert await reader.next(1) == published
    assert not reader.overflowed


def test_a_write_blocked_for_the_limit_closes_the_stream(
    make_core: Callable[..., LocalCore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """sessions-events.md, "Live event stream": a socket write that blocks for five
    seconds closes the stream, and execution never waits for the reader. (The limit is
    lowered to one second here to keep the test short.)"""
    monkeypatch.setattr(app_module, "STREAM_WRITE_TIMEOUT", 1.0, raising=False)
    core = make_core(faults=Faults(stream_buffer=100_000))
    api = Api(core)
    try:
        session = api.create_session(input="start")
        api.wait_status(session["id"], "idle")
        port = int(core.base_url.rsplit(":", 1)[1].split("/")[0])
        reader = socket.socket()
        reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        reader.connect(("127.0.0.1", port))
        reader.sendall(
            (
                f"GET /v1/agents/sessions/{session['id']}/events HTTP/1.1\r\n"
                f"Host: 127.0.0.1\r\nAuthorization: Bearer {core.api_key}\r\n"
                "OpenAI-Beta: agents=v1\r\n\r\n"
            ).encode()
        )
        assert reader.recv(12).startswith(b"HTTP/1.1 200")
        # About 16 MB of events that the reader never reads.
        text = "y" * (240 * 1024)
        for _ in range(32):
            batch = [message_event(text), message_event(text)]
            assert api.post_events(session["id"], batch).status_code == 202
        api.wait_status(session["id"], "idle", timeout=30)  # execution went on
        time.sleep(4)  # four times the lowered limit, without reading

        reader.settimeout(5)
        deadline = time.monotonic() + 30
        closed = False
        with reader:
            while time.monotonic() < deadline:
                try:
                    if not reader.recv(1 << 20):
                        closed = True
                        break
                except ConnectionResetError:
                    closed = True
                    break
                except TimeoutError:
                    break
        assert closed, "the blocked stream was never closed"
    finally:
        api.close()


def test_keepalives_go_out_while_events_flow(make_core: Callable[..., LocalCore]) -> None:
    """sessions-events.md, "Live event stream": a keepalive comment every interval (15 s;
    0.2 s here), also while events are being sent."""
    api = Api(make_core(keepalive_interval=0.2))
    try:
        session = api.create_session(input="start")
        api.wait_status(session["id"], "idle")
        reader = EventReader(api, session["id"])
        started = time.monotonic()
        while time.monotonic() - started < 1.6:
            assert api.post_events(session["id"], [message_event("more")]).status_code == 202
            time.sleep(0.02)
        keepalives = reader.comments.count("keepalive")
        busy = len(reader.events)
        reader.close()
        assert busy > 20, "events did not flow"
        assert keepalives >= 3
    finally:
        api.close()
