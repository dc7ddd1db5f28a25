"""A Session read sent before the stream reported a change must not undo that change.

Found by the simulator once it ran ``serve`` and ``run_turn`` themselves (its seeds 317,
302 and 3566 failed without these fixes): the stream reports the Session idle, or the
awaited Turn ended, while a read sent earlier is in flight, or another serve's stream
brings an older snapshot last; the older snapshot made the serve wait for news that had
already come, until its deadline. The core is driven here directly, message by message,
in exactly that order.
"""

from __future__ import annotations

from openagentcore.runner._core import RunnerCore, Serve, content_key
from openagentcore.runner._effects import (
    Lookup,
    LookupResult,
    PostResults,
    ReadSession,
    SessionOutcome,
    StoreAnswer,
)
from openagentcore.runner._registry import FunctionRegistry
from openagentcore.store import CallKey, CallState, MemoryResultStore
from openagentcore.types import (
    FunctionCallAction,
    InputMessageEvent,
    Session,
    SessionIdleEvent,
    SessionInProgressEvent,
    Turn,
    TurnCompletedEvent,
)

SESSION = "sess_stale"
TURN = "turn_stale"


def _core() -> RunnerCore:
    return RunnerCore(
        FunctionRegistry(),
        owner="test-owner",
        lease_seconds=60.0,
        max_concurrency=1,
        unknown_functions="leave",
        poll_interval=1.0,
        in_doubt_hook=False,
        action_hook=False,
    )


def _session(status: str) -> Session:
    return Session.model_construct(
        id=SESSION, status=status, required_actions=[], metadata={}, vault_ids=[]
    )


def _turn(status: str) -> Turn:
    return Turn.model_construct(
        id=TURN, session_id=SESSION, agent_id="agent_x", status=status, created_at=0
    )


def _read_in_flight(core: RunnerCore, serve: Serve) -> ReadSession:
    """Connect the serve's stream: the core sends a read of the Session."""
    core.on_connected(serve, 0.0)
    reads = [effect for effect in core.take_effects(0.0) if isinstance(effect, ReadSession)]
    assert len(reads) == 1
    return reads[0]


def test_serve_until_idle_ends_when_a_stale_read_follows_the_idle_event() -> None:
    core = _core()
    serve = core.attach(SESSION, "idle", 0.0)
    _read_in_flight(core, serve)
    idle = SessionIdleEvent.model_construct(type="agent.session.idle", session=_session("idle"))
    core.on_event(serve, idle, 0.1)

    core.on_session_read(SessionOutcome(SESSION, _session("in_progress")), 0.2)

    assert core.finished(serve, 0.2)
    assert serve.report.final_status == "idle"


def test_run_turn_ends_when_a_stale_read_follows_its_turns_end() -> None:
    core = _core()
    serve = core.attach(SESSION, "connected", 0.0)
    _read_in_flight(core, serve)
    core.on_session_read(SessionOutcome(SESSION, _session("idle")), 0.05)
    core.start_turn(serve, TURN, "in_progress", reconnects=0, now=0.05)
    core.on_dropped(serve)  # the stream reconnects: the Turn is read with the Session
    read = _read_in_flight(core, serve)
    assert read.turn_id == TURN
    ended = TurnCompletedEvent.model_construct(
        type="agent.session.turn.completed", session_id=SESSION, turn_id=TURN, turn=None
    )
    core.on_event(serve, ended, 0.1)

    core.on_session_read(
        SessionOutcome(SESSION, _session("in_progress"), _turn("in_progress")), 0.2
    )

    assert core.finished(serve, 0.2)
    assert serve.target_turn_status == "completed"


def test_a_serve_ending_leaves_the_others_of_its_session_a_fresh_read() -> None:
    """Two serves of one Session (``serve`` and ``run_turn`` in one runner) follow two
    streams, whose copies of an event arrive at different times. The slower stream's
    older snapshot may come last; if its serve then ends, no later event of that
    stream corrects it, so the serves left read the Session again."""
    core = _core()
    serving = core.attach(SESSION, "idle", 0.0)
    turning = core.attach(SESSION, "connected", 0.0)
    core.on_connected(serving, 0.0)
    core.on_connected(turning, 0.0)
    core.take_effects(0.0)
    core.on_session_read(SessionOutcome(SESSION, _session("in_progress")), 0.01)
    idle = SessionIdleEvent.model_construct(type="agent.session.idle", session=_session("idle"))
    in_progress = SessionInProgressEvent.model_construct(
        type="agent.session.in_progress", session=_session("in_progress")
    )
    core.on_event(serving, idle, 0.1)
    core.on_event(turning, in_progress, 0.11)  # sent before the idle event, arrives after

    core.detach(turning, 0.12)

    assert not core.finished(serving, 0.12)
    reads = [effect for effect in core.take_effects(0.12) if isinstance(effect, ReadSession)]
    assert len(reads) == 1
    core.on_session_read(SessionOutcome(SESSION, _session("idle")), 0.13)
    assert core.finished(serving, 0.13)


def test_run_turn_reads_the_turn_it_names_after_a_read_that_could_not_name_it() -> None:
    """``run_turn``'s input is sent; the stream drops and reconnects before the POST
    returns, so the read on reconnect cannot ask for the Turn, which has no name yet,
    and shows the Session busy with another Turn. When the POST returns and names the
    Turn, it may have ended (a cancel) while the stream was down: only a read of it
    tells, so one must be sent. (Its loopback form, on both runners, is in
    test_cancel_and_rerun.py.)"""
    core = _core()
    serve = core.attach(SESSION, "connected", 0.0)
    _read_in_flight(core, serve)
    core.on_session_read(SessionOutcome(SESSION, _session("idle")), 0.05)
    assert core.finished(serve, 0.05)
    go = InputMessageEvent.from_text("go")
    assert core.expect_turn(serve, serve.report.reconnects, content_key(go.input[0].content))
    core.on_dropped(serve)
    before = _read_in_flight(core, serve)
    assert before.turn_id is None  # nothing named the Turn yet
    core.on_session_read(SessionOutcome(SESSION, _session("requires_action")), 0.2)

    core.start_turn(serve, TURN, "queued", reconnects=0, now=0.2)

    reads = [effect for effect in core.take_effects(0.3) if isinstance(effect, ReadSession)]
    assert [read.turn_id for read in reads] == [TURN]


def test_a_result_found_saved_for_a_cancelled_turn_is_posted_again_not_marked_abandoned() -> None:
    """A result this runner found in the store (another worker saved it, and may have
    posted it) for a Turn it knows cancelled: only the server can say whether it took
    the result, so it is posted again. Marking it ``abandoned`` told the operator the
    server never got a result it had accepted (found by the simulator, seed 943; once a
    failed claim stopped delaying its Session's next read, seeds 53 and 1022 too)."""
    key = CallKey(SESSION, TURN, "call_found")
    store = MemoryResultStore()
    store.claim(key, function_name="ship", arguments_hash="h", owner="w2", lease_seconds=60)
    event = {"type": "agent.session.input.tool_result", "turn_id": TURN, "call_id": key.call_id}
    store.save_result(key, {**event, "success": True, "output": "shipped"}, owner="w2")
    store.mark(key, CallState.SUBMITTED)  # the other worker's POST was accepted
    record = store.get(key)
    assert record is not None
    core = _core()  # serves no "ship": the call is looked up, not claimed
    serve = core.attach(SESSION, "once", 0.0)
    _read_in_flight(core, serve)
    action = FunctionCallAction(turn_id=TURN, call_id=key.call_id, name="ship", arguments={})
    waiting = _session("requires_action").model_copy(update={"required_actions": [action]})
    core.on_session_read(SessionOutcome(SESSION, waiting), 0.01)
    (lookup,) = [e for e in core.take_effects(0.01) if isinstance(e, Lookup)]
    core._view(SESSION).cancelled_turns.add(TURN)  # the stream showed the Turn cancelled

    core.on_store_answer(StoreAnswer(lookup, LookupResult(record, stale=False)), 0.02)
    effects = core.take_effects(1.0)

    posted = [r.key for e in effects if isinstance(e, PostResults) for r in e.batch.records]
    assert posted == [key]
    assert serve.report.abandoned == []
