"""How ``run_turn`` learns the Turn its input started (or joined).

The stream names it with no request: the input's first message becomes a user Item of
that Turn, streamed as ``item.added`` with the Turn's id. Only when the stream dropped
before that Item showed does ``run_turn`` look the Item up in the history. The rules
are driven here on the core directly; the end-to-end tests count the runner's requests
against LocalCore. (``test_run_turn_identity`` has another client's Turns in between.)
"""

from __future__ import annotations

import time
from collections.abc import Callable

from openagentcore.local import FunctionCall, LocalCore, Scenario, TurnScript
from openagentcore.runner._core import RunnerCore, Serve, content_key, heeds
from openagentcore.runner._effects import SessionOutcome
from openagentcore.types import (
    InputText,
    ItemAddedEvent,
    MessageItem,
    Turn,
    TurnCreatedEvent,
    UserMessage,
)

from ._support import CallLog, Harness
from .test_delivery import register_add
from .test_stale_reads import SESSION, _core, _read_in_flight, _session

MakeCore = Callable[..., LocalCore]
MakeHarness = Callable[..., Harness]


def _connected(status: str) -> tuple[RunnerCore, Serve]:
    core = _core()
    serve = core.attach(SESSION, "connected", 0.0)
    _read_in_flight(core, serve)
    core.on_session_read(SessionOutcome(SESSION, _session(status)), 0.0)
    return core, serve


def _created(turn_id: str) -> TurnCreatedEvent:
    turn = Turn.model_construct(
        id=turn_id, session_id=SESSION, agent_id="agent_x", status="queued", created_at=0
    )
    return TurnCreatedEvent.model_construct(
        type="agent.session.turn.created", session_id=SESSION, turn_id=turn_id, turn=turn
    )


MINE = content_key(UserMessage.from_text("mine").content)


def _user_item(turn_id: str, text: str) -> ItemAddedEvent:
    item = MessageItem.model_construct(
        id=f"msg_{turn_id}_{text}",
        type="message",
        turn_id=turn_id,
        role="user",
        content=[InputText(text=text)],
        status="completed",
        phase=None,
    )
    return ItemAddedEvent.model_construct(
        type="agent.session.turn.item.added", session_id=SESSION, turn_id=turn_id, item=item
    )


def test_the_turn_of_the_inputs_own_item_is_its_turn_not_the_first_created() -> None:
    """Another client's input starts a Turn first: its Item has other content."""
    core, serve = _connected("idle")
    assert core.expect_turn(serve, reconnects=0, input_key=MINE)
    assert not core.finished(serve, 0.1)

    core.on_event(serve, _created("turn_theirs"), 0.1)
    core.on_event(serve, _user_item("turn_theirs", "theirs"), 0.1)
    assert not core.finished(serve, 0.1)
    core.on_event(serve, _created("turn_mine"), 0.1)
    core.on_event(serve, _user_item("turn_mine", "mine"), 0.1)
    core.on_event(serve, _user_item("turn_later", "mine"), 0.1)

    assert core.finished(serve, 0.1)
    assert serve.created_turn == "turn_mine"


def test_an_input_that_joins_a_running_turn_is_named_by_its_item() -> None:
    """On a Session at work the input joins its Turn: no Turn is created, but the
    input's Item carries the Turn's id."""
    core, serve = _connected("requires_action")
    assert core.expect_turn(serve, reconnects=0, input_key=MINE)

    core.on_event(serve, _user_item("turn_open", "mine"), 0.1)

    assert core.finished(serve, 0.1)
    assert serve.created_turn == "turn_open"


def test_an_item_with_the_same_content_streamed_before_the_input_was_sent_is_not_it() -> None:
    core, serve = _connected("idle")
    core.on_event(serve, _user_item("turn_earlier", "mine"), 0.1)
    assert core.expect_turn(serve, reconnects=0, input_key=MINE)

    assert not core.finished(serve, 0.1)
    assert serve.created_turn is None


def test_a_drop_before_the_inputs_item_was_seen_falls_back_to_the_history() -> None:
    core, serve = _connected("idle")
    assert core.expect_turn(serve, reconnects=0, input_key=MINE)

    core.on_dropped(serve)  # the created event may have been lost with the stream

    assert core.finished(serve, 0.1)
    assert serve.created_turn is None


def test_run_turn_on_an_idle_session_makes_no_request_to_find_its_turn(
    make_core: MakeCore, make_harness: MakeHarness
) -> None:
    scenario = Scenario(
        turns=[
            TurnScript(answer="first"),
            TurnScript(steps=[[FunctionCall("add", {"a": 1, "b": 2})]], answer="{summary}"),
        ]
    )
    harness = make_harness(make_core(scenario=scenario))
    register_add(harness, "def", CallLog())
    session_id = harness.create_session()
    harness.serve(session_id)

    result = harness.run_turn(session_id, "again")

    assert result.status == "completed"
    assert result.text == "Results: add: 3."
    (latest, *_) = harness.client.sessions.turns.list(session_id, order="desc").data
    assert result.turn_id == latest.id
    assert harness.statuses("GET", "/turns") == []


def test_run_turn_on_a_session_waiting_for_a_call_follows_the_turn_it_joins(
    make_core: MakeCore, make_harness: MakeHarness
) -> None:
    """Input sent while a Turn waits for a result joins that Turn (steering): there is
    no new Turn, and the input's Item in the stream names the one it joined."""
    scenario = Scenario(turns=[TurnScript(steps=[[FunctionCall("add", {"a": 2, "b": 5})]])])
    harness = make_harness(make_core(scenario=scenario))

    def add(a: int, b: int) -> int:
        """Add, once the runner has sent its input: the Turn waits for this result."""
        deadline = time.monotonic() + 5
        while not harness.statuses("POST", "/events"):
            assert time.monotonic() < deadline, "run_turn sent no input"
            time.sleep(0.01)
        return a + b

    harness.runner.function(name="add")(add)
    session_id = harness.create_session()
    harness.wait_for_pending(session_id)
    (waiting, *_) = harness.client.sessions.turns.list(session_id, order="desc").data

    result = harness.run_turn(session_id, "and hurry")

    assert result.turn_id == waiting.id
    assert result.status == "completed"
    assert result.report.calls_run == 1
    assert harness.statuses("GET", "/turns") == []


def test_a_driver_that_skips_the_events_the_core_does_not_heed_ends_in_the_same_state(
    make_core: MakeCore, make_harness: MakeHarness
) -> None:
    """Readers skip a round for text deltas, content parts, Turns starting and calls
    still streaming their arguments (``heeds``): fed a real Turn's events, a core given
    only the heeded ones decides exactly what a core given all of them does."""
    scenario = Scenario(
        turns=[
            TurnScript(answer="ready"),
            TurnScript(steps=[[FunctionCall("add", {"a": 1, "b": 2})]], answer="a long {summary}"),
        ]
    )
    harness = make_harness(make_core(scenario=scenario))
    register_add(harness, "def", CallLog())
    session_id = harness.create_session()
    harness.serve(session_id)
    events = []
    with harness.client.sessions.events.stream(session_id) as stream:
        harness.run_turn(session_id, "again")
        for event in stream:
            events.append(event)
            if event.type == "agent.session.idle":
                break
    skipped = {event.type for event in events if not heeds(event)}
    assert {
        "agent.session.turn.output_text.delta",
        "agent.session.turn.in_progress",
        "agent.session.turn.created",
    } <= skipped
    # What the core needs of a Turn: snapshots, the complete call, the result Item (it
    # proves the result applied), the final message, the input's Item and the end.
    heeded = {
        (event.type, getattr(getattr(event, "item", None), "type", None))
        for event in events
        if heeds(event)
    }
    assert heeded >= {
        ("agent.session.requires_action", None),
        ("agent.session.idle", None),
        ("agent.session.turn.item.done", "function_call"),
        ("agent.session.turn.item.added", "function_call_output"),
        ("agent.session.turn.item.done", "message"),
        ("agent.session.turn.item.added", "message"),
        ("agent.session.turn.completed", None),
    }

    cores = []
    for only_heeded in (False, True):
        core = _core()
        serve = core.attach(session_id, "turn", 0.0)
        core.on_connected(serve, 0.0)
        core.start_turn(serve, "turn_unknown_yet", "queued", reconnects=0, now=0.0)
        seen: list[object] = []
        for event in events:
            if only_heeded and not heeds(event):
                continue
            core.on_event(serve, event, 1.0)
            seen.append([type(effect).__name__ for effect in core.take_effects(1.0)])
        view = core._view(session_id)
        cores.append(
            (
                [step for step in seen if step],
                serve.messages_by_turn,
                serve.ends_by_turn,
                view.status,
                view.pending,
            )
        )
    assert cores[0] == cores[1]
