"""A stopped serve waits for the calls of its Session in flight when it was stopped,
not for calls that later serves of the Session (``run_turn`` in the same runner) take
on afterwards: those could keep it from returning for as long as they keep coming.
Found by the simulator's watch on stopped serves (seed 588, a worker that serves a
Session until stopped while it drives Turns on it)."""

from __future__ import annotations

from dataclasses import replace

import httpx

from openagentcore import NotFoundError
from openagentcore.runner._core import Phase, RunnerCore
from openagentcore.runner._effects import (
    ClaimCall,
    FunctionOutcome,
    PostOutcome,
    PostResults,
    RunFunction,
    SaveResult,
    SessionOutcome,
    StoreAnswer,
)
from openagentcore.runner._registry import FunctionRegistry, describe_function
from openagentcore.store import CallState, Claim
from openagentcore.types import FunctionCallAction, Session

from ._support import won_claim

SESSION = "sess_stop"
TURN = "turn_stop"


def ship(order: int) -> str:
    """Ship an order."""
    return f"shipped {order}"


def _core() -> RunnerCore:
    registry = FunctionRegistry()
    registry.add(describe_function(ship))
    return RunnerCore(
        registry,
        owner="worker-a",
        lease_seconds=10.0,
        max_concurrency=4,
        unknown_functions="leave",
        poll_interval=1.0,
        in_doubt_hook=False,
        action_hook=False,
    )


def _session(*call_ids: str) -> Session:
    actions = [
        FunctionCallAction(turn_id=TURN, call_id=call_id, name="ship", arguments={"order": 1})
        for call_id in call_ids
    ]
    return Session.model_construct(
        id=SESSION,
        status="requires_action" if actions else "idle",
        required_actions=actions,
        metadata={},
        vault_ids=[],
    )


def test_a_stopped_serve_does_not_wait_for_calls_a_later_serve_took_on() -> None:
    core = _core()
    serving = core.attach(SESSION, "forever", 0.0)
    core.on_connected(serving, 0.0)
    core.take_effects(0.0)
    core.on_session_read(SessionOutcome(SESSION, _session()), 0.01)
    turning = core.attach(SESSION, "turn", 0.02)  # run_turn, in the same runner
    core.stop(serving.id)
    assert core.finished(serving, 0.03)  # nothing was in flight

    core.on_connected(turning, 0.04)
    core.take_effects(0.04)
    core.on_session_read(SessionOutcome(SESSION, _session("call_later")), 0.05)
    claims = [effect for effect in core.take_effects(0.05) if isinstance(effect, ClaimCall)]

    assert [claim.key.call_id for claim in claims] == ["call_later"]  # run_turn's to run
    assert core.busy(SESSION)
    assert core.finished(serving, 0.06)


def test_a_stopped_serve_waits_for_the_calls_it_had_in_flight() -> None:
    core = _core()
    serving = core.attach(SESSION, "forever", 0.0)
    core.on_connected(serving, 0.0)
    core.take_effects(0.0)
    core.on_session_read(SessionOutcome(SESSION, _session("call_early")), 0.01)
    claims = [effect for effect in core.take_effects(0.01) if isinstance(effect, ClaimCall)]
    assert [claim.key.call_id for claim in claims] == ["call_early"]

    core.stop(serving.id)

    assert not core.finished(serving, 0.02)


def test_a_result_post_answered_404_ends_the_calls_it_carried() -> None:
    """The Session was deleted while its result was being posted: the POST's 404 ends
    the serves of the Session, and the calls that POST carried end with them. They were
    left ``posting`` for ever, so the Session stayed busy and ``close()`` waited out its
    whole grace (the simulator's seeds 203 and 238, with Sessions deleted while served)."""
    core = _core()
    serving = core.attach(SESSION, "forever", 0.0)
    core.on_connected(serving, 0.0)
    core.take_effects(0.0)
    core.on_session_read(SessionOutcome(SESSION, _session("call_0")), 0.01)
    (claim,) = [effect for effect in core.take_effects(0.01) if isinstance(effect, ClaimCall)]
    won = won_claim(claim, 0.02)
    core.on_store_answer(won, 0.02)
    assert isinstance(won.value, Claim)
    record = won.value.record
    assert any(isinstance(effect, RunFunction) for effect in core.take_effects(0.02))
    event = {
        "type": "agent.session.input.tool_result",
        "turn_id": TURN,
        "call_id": "call_0",
        "success": True,
        "output": "shipped 1",
    }
    core.on_function_done(FunctionOutcome(claim.key, event), 0.03)
    (save,) = [effect for effect in core.take_effects(0.03) if isinstance(effect, SaveResult)]
    saved = replace(record, state=CallState.COMPLETED, result=save.event)
    core.on_store_answer(StoreAnswer(save, saved), 0.04)
    (post,) = [effect for effect in core.take_effects(1.0) if isinstance(effect, PostResults)]
    request = httpx.Request("POST", f"http://core.invalid/v1/agents/sessions/{SESSION}/events")
    gone = NotFoundError(
        "Session not found.",
        response=httpx.Response(404, request=request),
        body={"error": {"type": "not_found_error", "message": "Session not found."}},
    )

    core.on_posted(PostOutcome(post.batch, gone), 1.01)

    assert not core.busy(SESSION)
    assert core.calls[claim.key].phase is Phase.DONE
