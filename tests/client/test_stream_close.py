"""Closing a sync event stream from another thread while it is read.

The runner's stream readers block in a read while a serve ends on another thread,
which closes their stream to wake them. Closing the socket under a read in progress
frees its descriptor while the read may still use the number; a connection opened
meanwhile can get it, and the read then waits on (or reads) someone else's
connection: seen as a reader that outlived ``close()`` by its whole read timeout.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from openagentcore import Client
from openagentcore.local import LocalCore, Scenario, TurnScript


@pytest.fixture
def core() -> Iterator[LocalCore]:
    with LocalCore(scenario=Scenario(turns=[TurnScript()])) as local:
        yield local


def test_a_close_from_another_thread_wakes_the_reader_which_closes_the_response(
    core: LocalCore,
) -> None:
    with Client(api_key=core.api_key, base_url=core.base_url) as client:
        session_id = client.sessions.create(agent={"model": "scripted"}, input="hi").id
        stream = client.sessions.events.stream(session_id)
        closed_by: list[threading.Thread] = []
        close_response = stream.response.close

        def record_close() -> None:
            closed_by.append(threading.current_thread())
            close_response()

        stream.response.close = record_close  # type: ignore[method-assign]
        reading = threading.Event()
        failures: list[BaseException] = []

        def read() -> None:
            reading.set()
            try:
                for _ in stream:
                    pass
            except BaseException as exc:  # pragma: no cover - reported below
                failures.append(exc)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        assert reading.wait(10)
        # The reader is in its read: the Session is idle, so no event comes before the
        # keepalive, long after this test's wait.
        assert _until(lambda: stream._reading), "the reader never started its read"
        stream.close()
        reader.join(10)
        assert not reader.is_alive(), "closing the stream did not wake its reader"
        assert not failures, "a close from another thread should end the iteration"
        assert closed_by == [reader], "the response was closed under the read in progress"
        assert list(stream) == []


def _until(condition: Callable[[], bool], limit: float = 10.0) -> bool:
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def test_a_stream_closed_by_its_own_thread_closes_its_response_at_once(
    core: LocalCore,
) -> None:
    with Client(api_key=core.api_key, base_url=core.base_url) as client:
        session_id = client.sessions.create(agent={"model": "scripted"}, input="hi").id
        stream = client.sessions.events.stream(session_id)
        stream.close()
        assert stream.response.is_closed
        assert list(stream) == []


def test_a_close_from_a_signal_handler_on_the_reading_thread_cannot_deadlock(
    core: LocalCore,
) -> None:
    """A handler (SIGTERM, say) runs on the main thread between two of its bytecodes,
    possibly while that thread holds the stream's lock: closing from there must not wait
    for a lock its own thread holds."""
    with Client(api_key=core.api_key, base_url=core.base_url) as client:
        session_id = client.sessions.create(agent={"model": "scripted"}, input="hi").id
        stream = client.sessions.events.stream(session_id)

        def interrupted_then_closed() -> None:
            with stream._lock:  # where the handler would interrupt the reading thread
                stream.close()

        thread = threading.Thread(target=interrupted_then_closed, daemon=True)
        thread.start()
        thread.join(10)
        assert not thread.is_alive(), "close() waited for a lock its own thread holds"
        assert list(stream) == []
