"""``LocalCore.stream_counts()``: the event streams open per Session, for tests that
check a fleet follows each Session once."""

from __future__ import annotations

import time

from openagentcore import Client
from openagentcore.local import LocalCore


def test_stream_counts_follow_streams_opening_and_closing() -> None:
    with LocalCore() as core, Client(api_key=core.api_key, base_url=core.base_url) as client:
        first = client.sessions.create(agent={"model": "scripted"}, input="hi").id
        second = client.sessions.create(agent={"model": "scripted"}, input="hi").id
        assert core.stream_counts() == {}
        one = client.sessions.events.stream(first)
        two = client.sessions.events.stream(first)
        three = client.sessions.events.stream(second)
        assert core.stream_counts() == {first: 2, second: 1}
        one.close()
        three.close()
        deadline = time.monotonic() + 30
        while core.stream_counts() != {first: 1}:  # the server sees the disconnects
            assert time.monotonic() < deadline, core.stream_counts()
            time.sleep(0.02)
        two.close()
