"""Each fault knob, shown to happen, deterministically."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from openagentcore.local import Faults, LocalCore
from openagentcore.local._faults import parse_fault

from ._support import FUNCTION_TOOLS, Api, EventReader, message_event, result_event


@pytest.fixture
def faulty(make_core: Callable[..., LocalCore]) -> Callable[..., Api]:
    def make(**knobs: object) -> Api:
        return Api(make_core(faults=Faults(**knobs)))  # type: ignore[arg-type]

    return make


def test_close_stream_after_k_events(faulty: Callable[..., Api]) -> None:
    api = faulty(close_stream_after=3)
    session = api.create_session()
    api.wait_status(session["id"], "idle")
    reader = EventReader(api, session["id"])
    api.post_events(session["id"], [message_event("go")])
    reader.wait_closed()
    assert reader.types() == [
        "agent.session.turn.created",
        "agent.session.turn.item.added",
        "agent.session.in_progress",
    ]
    api.wait_status(session["id"], "idle")
    reader.close()


def test_duplicate_every_nth_event(faulty: Callable[..., Api]) -> None:
    api = faulty(duplicate_every=2)
    session = api.create_session()
    api.wait_status(session["id"], "idle")
    reader = EventReader(api, session["id"])
    api.post_events(session["id"], [message_event("go")])
    reader.wait_for("agent.session.idle")
    ids = [event["event_id"] for event in reader.events]
    unique = list(dict.fromkeys(ids))
    assert ids[:3] == [unique[0], unique[1], unique[1]]
    assert len(ids) == len(unique) + len(unique) // 2
    reader.close()


def test_reject_input_before_admitting(faulty: Callable[..., Api]) -> None:
    api = faulty(reject_input_every=2, retry_after=3)
    session = api.create_session()
    api.wait_status(session["id"], "idle")
    assert api.post_events(session["id"], [message_event("first")], key="a").status_code == 202
    api.wait_status(session["id"], "idle")
    rejected = api.post_events(session["id"], [message_event("second")], key="b")
    assert rejected.status_code == 503
    assert rejected.headers["Retry-After"] == "3"
    assert rejected.json()["error"]["type"] == "server_error"
    turns = api.http.get(f"/agents/sessions/{session['id']}/turns").json()["data"]
    assert len(turns) == 2
    assert api.post_events(session["id"], [message_event("second")], key="b").status_code == 202
    api.wait_status(session["id"], "idle")
    assert len(api.http.get(f"/agents/sessions/{session['id']}/turns").json()["data"]) == 3


def test_lost_response_admits_the_batch(faulty: Callable[..., Api]) -> None:
    api = faulty(lose_input_response_every=1)
    session = api.create_session()
    api.wait_status(session["id"], "idle")
    lost = api.post_events(session["id"], [message_event("once")], key="k")
    assert lost.status_code == 503
    api.wait_status(session["id"], "idle")
    assert len(api.http.get(f"/agents/sessions/{session['id']}/turns").json()["data"]) == 2
    # The retry with the same key admits nothing twice (and its response is lost again).
    assert api.post_events(session["id"], [message_event("once")], key="k").status_code == 503
    assert len(api.http.get(f"/agents/sessions/{session['id']}/turns").json()["data"]) == 2


def test_pending_call_delay_rejects_early_results(faulty: Callable[..., Api]) -> None:
    api = faulty(pending_call_delay=0.3)
    session = api.create_session(tools=FUNCTION_TOOLS[:1], input="ping", stream=False)
    calls: list[dict[str, object]] = []
    deadline = time.monotonic() + 2
    while not calls:
        assert time.monotonic() < deadline
        items = api.items(session["id"])
        calls = [item for item in items if item["type"] == "function_call"]
    early = api.post_events(
        session["id"], [result_event({**calls[0], "turn_id": calls[0]["turn_id"]}, "2")]
    )
    assert early.status_code == 400
    assert early.json()["error"]["message"] == "Unknown pending tool call."
    action = api.wait_status(session["id"], "requires_action")["required_actions"][0]
    assert action["call_id"] == calls[0]["call_id"]
    assert api.post_events(session["id"], [result_event(action, "2")]).status_code == 202
    api.wait_status(session["id"], "idle")


def test_slow_reader_is_cut_off_with_stream_interrupted(faulty: Callable[..., Api]) -> None:
    api = faulty(stream_buffer=2)
    session = api.create_session()
    api.wait_status(session["id"], "idle")
    request = api.http.build_request("GET", f"/agents/sessions/{session['id']}/events")
    response = api.http.send(request, stream=True)
    api.post_events(session["id"], [message_event("a long answer " * 20)])
    api.wait_status(session["id"], "idle")
    # The reader only starts now: more than two events were published meanwhile.
    reader = EventReader(api, response=response)
    reader.wait_closed()
    assert reader.types()[-1] == "error"
    error = reader.events[-1]["error"]
    assert (error["type"], error["code"]) == ("server_error", "stream_interrupted")
    assert "param" not in error
    reader.close()


def test_keepalive_comments(api: Api) -> None:
    session = api.create_session()
    reader = EventReader(api, session["id"])
    deadline = time.monotonic() + 2
    while "keepalive" not in reader.comments:
        assert time.monotonic() < deadline, reader.comments
        time.sleep(0.01)
    assert reader.comments[0] == "connected"
    reader.close()


def test_stream_is_live_only_and_ignores_last_event_id(api: Api) -> None:
    session = api.create_session()
    api.wait_status(session["id"], "idle")
    api.http.headers["Last-Event-ID"] = "event_0"
    try:
        reader = EventReader(api, session["id"])
    finally:
        del api.http.headers["Last-Event-ID"]
    time.sleep(0.05)
    assert reader.events == []
    api.post_events(session["id"], [message_event("now")])
    assert reader.wait_for("agent.session.turn.created")["type"] == "agent.session.turn.created"
    reader.close()


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("duplicate_every=3", Faults(duplicate_every=3)),
        ("pending-call-delay=0.5", Faults(pending_call_delay=0.5)),
        ("stream_buffer=4", Faults(stream_buffer=4)),
    ],
)
def test_parse_fault(spec: str, expected: Faults) -> None:
    assert parse_fault(spec, Faults()) == expected


@pytest.mark.parametrize(
    "spec", ["nope=1", "duplicate_every", "duplicate_every=x", "duplicate_every=0"]
)
def test_parse_fault_rejects_bad_specs(spec: str) -> None:
    with pytest.raises(ValueError, match=r"duplicate_every|NAME=VALUE|at least 1"):
        parse_fault(spec, Faults())
