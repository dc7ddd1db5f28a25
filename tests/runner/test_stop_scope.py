"""A stopped serve waits for the calls of its Session in flight when it was stopped,
not for calls that later serves of the Session (``run_turn`` in the same runner) take
on afterwards: those could keep it from returning for as long as they keep coming.
Found by the simulator's watch on stopped serves (seed 588, a worker that serves a
Session until stopped while it drives Turns on it)."""

from __future__ import annotations

from openagentcore.runner._core import RunnerCore
from openagentcore.runner._effects import ClaimCall, SessionOutcome
from openagentcore.runner._registry import FunctionRegistry, describe_function
from openagentcore.types import FunctionCallAction, Session

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
