"""``run_turn`` returns the Turn its own input started, never another client's.

The input POST returns 202 with no body, and no Turn names the input that started it;
what does is the input's user Item, which carries the Turn's id. Identifying the Turn
as "the first one created after sending" or "the latest one" fails when another
client's input starts (and ends) a Turn first: while ``run_turn``'s POST waits to be
retried after a 503, or after the stream dropped and before the Turns are listed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import pytest
from starlette.responses import Response

from openagentcore import Client
from openagentcore.local import LocalCore, Scenario, TurnScript
from openagentcore.types import InputMessageEvent

from ._hostile import HostileProxy, api_error
from ._support import Harness

RUNNER_COMBINATIONS = [("sync", "def"), ("async", "def")]
MakeCore = Callable[..., LocalCore]
MakeHarness = Callable[..., Harness]
Rule = Callable[[str, str, bytes], Response | None]


@dataclass(frozen=True)
class _Upstream:
    """What :class:`Harness` needs of a server: where it is and its key."""

    base_url: str
    api_key: str


@pytest.fixture
def proxy_for() -> Iterator[Callable[[LocalCore], HostileProxy]]:
    proxies: list[HostileProxy] = []

    def start(core: LocalCore) -> HostileProxy:
        proxy = HostileProxy(core.base_url).start()
        proxies.append(proxy)
        return proxy

    yield start
    for proxy in proxies:
        proxy.stop()


def _setup(
    make_core: MakeCore,
    make_harness: MakeHarness,
    proxy_for: Callable[[LocalCore], HostileProxy],
    answers: list[str],
) -> tuple[Harness, HostileProxy, Client, str]:
    """A Session whose first Turn has ended; the runner talks through a proxy, the
    other client straight to the server."""
    core = make_core(scenario=Scenario(turns=[TurnScript(answer=text) for text in answers]))
    proxy = proxy_for(core)
    harness = make_harness(cast("LocalCore", _Upstream(proxy.base_url, core.api_key)))
    other = Client(api_key=core.api_key, base_url=core.base_url)
    session_id = harness.create_session(input="hello")
    _until_idle(other, session_id)
    return harness, proxy, other, session_id


def _until_idle(client: Client, session_id: str) -> None:
    deadline = time.monotonic() + 20
    while client.sessions.retrieve(session_id).status != "idle":
        assert time.monotonic() < deadline, f"Session {session_id} never became idle"
        time.sleep(0.01)


def _send(client: Client, session_id: str, text: str) -> None:
    """Another client's input, waited out until its Turn ended."""
    client.sessions.events.create(session_id, events=[InputMessageEvent.from_text(text)])
    _until_idle(client, session_id)


def _once(on_my_input: Callable[[bytes], Response]) -> Rule:
    """Answers the first POST of ``run_turn``'s input ("mine") with ``on_my_input``."""
    seen: list[bytes] = []

    def rule(method: str, path: str, body: bytes) -> Response | None:
        if method == "POST" and path.endswith("/events") and b"mine" in body and not seen:
            seen.append(body)
            return on_my_input(body)
        return None

    return rule


def test_a_retried_input_is_followed_to_its_own_turn(
    make_core: MakeCore,
    make_harness: MakeHarness,
    proxy_for: Callable[[LocalCore], HostileProxy],
) -> None:
    """The first POST gets 503 with Retry-After; meanwhile another client's input starts
    and ends a Turn. The retried input starts the next Turn, whose answer is returned."""
    harness, proxy, other, session_id = _setup(
        make_core, make_harness, proxy_for, ["first", "the answer to theirs", "my answer"]
    )

    def refuse_after_theirs(body: bytes) -> Response:
        _send(other, session_id, "theirs")
        refused = api_error(503, "execution_unavailable", "Try again.", type="server_error")
        refused.headers["Retry-After"] = "0"
        return refused

    proxy.rule = _once(refuse_after_theirs)
    try:
        result = harness.run_turn(session_id, "mine")
    finally:
        other.close()

    posts = proxy.statuses(lambda method, path: method == "POST" and path.endswith("/events"))
    assert posts[:2] == [503, 202], "the input was not refused once, then admitted"
    assert result.text == "my answer"
    assert result.status == "completed"


def test_an_input_whose_item_the_stream_missed_is_found_in_the_history(
    make_core: MakeCore,
    make_harness: MakeHarness,
    proxy_for: Callable[[LocalCore], HostileProxy],
) -> None:
    """The input is admitted and its Turn ends; another client's input then starts and
    ends a later Turn; and the stream drops before ``run_turn`` saw any of it. The
    latest Turn is the other client's: the input's own Item names its Turn."""
    harness, proxy, other, session_id = _setup(
        make_core, make_harness, proxy_for, ["first", "my answer", "the answer to theirs"]
    )
    broken: list[bytes] = []

    def break_the_stream(line: bytes) -> bytes:
        if line.startswith(b"data:") and not broken:
            broken.append(line)
            raise ConnectionResetError("test: the stream drops")
        return line

    def admit_then_theirs(body: bytes) -> Response:
        events: list[dict[str, Any]] = json.loads(body)["events"]
        other.sessions.events.create(session_id, events=events)
        _until_idle(other, session_id)
        _send(other, session_id, "theirs")
        proxy.rewrite = break_the_stream  # the next streamed event is never delivered
        return Response(status_code=202)

    proxy.rule = _once(admit_then_theirs)
    try:
        result = harness.run_turn(session_id, "mine")
    finally:
        other.close()

    assert broken, "the stream did not drop"
    assert result.report.reconnects >= 1
    assert result.text == "my answer"
    assert result.status == "completed"
