"""A ``recover`` pass (a serve of mode ``once``) whose last call waits on a store that
is down returns, as the full judge would say; the incremental judge must not miss it.

The core judges only the serves of Sessions touched since the last round. A once serve
may return when every call left is one the store could not even be asked about (its
claim or lookup waits to be sent again, ``retry`` set): a change to such a call must
touch its Session. The claim of an idempotent function started with it (the fast path),
whose function ended first, failed to: the serve waited for the store to come back.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TypeVar

from openagentcore.runner._core import Phase, RunnerCore
from openagentcore.runner._effects import (
    ClaimCall,
    Effect,
    FunctionOutcome,
    Lookup,
    LookupResult,
    ReadSession,
    RunFunction,
    SessionOutcome,
    StoreAnswer,
)
from openagentcore.runner._pump import Message, run_round
from openagentcore.runner._registry import FunctionRegistry, describe_function
from openagentcore.runner._results import success_event
from openagentcore.store import CallKey, Claim, StoreUnavailableError
from openagentcore.types import FunctionCallAction, Session

from ._support import won_claim

SESSION = "sess_recover"
TURN = "turn_recover"
T = TypeVar("T")


def reserve(order: str) -> str:
    """Reserve stock for an order (safe to repeat)."""
    return f"reserved {order}"


def charge(order: str) -> str:
    """Charge an order (not safe to repeat)."""
    return f"charged {order}"


def _core() -> RunnerCore:
    registry = FunctionRegistry()
    registry.add(describe_function(reserve, idempotent=True))
    registry.add(describe_function(charge))
    return RunnerCore(
        registry,
        owner="worker-a",
        lease_seconds=10.0,
        max_concurrency=1,  # one call at a time: the second is looked up, not claimed
        unknown_functions="leave",
        poll_interval=1.0,
        in_doubt_hook=False,
        action_hook=False,
        idempotent_fast_path=True,
    )


def _of(effects: list[Effect], kind: type[T]) -> list[T]:
    return [effect for effect in effects if isinstance(effect, kind)]


def _read() -> Message:
    actions = [
        FunctionCallAction(turn_id=TURN, call_id=f"call_{n}", name=name, arguments={"order": "o"})
        for n, name in enumerate(["charge", "reserve"])
    ]
    session = Session.model_construct(
        id=SESSION, status="requires_action", required_actions=actions, metadata={}, vault_ids=[]
    )
    return SessionOutcome(SESSION, session)


def test_a_recover_pass_returns_when_its_last_claim_waits_for_the_store() -> None:
    core = _core()
    serve = core.attach(SESSION, "once", 0.0)
    assert len(_of(run_round(core, None, [], 0.0).effects, ReadSession)) == 1

    # The read lists two calls pending before this runner came: the first is claimed
    # (it takes the only slot), the second is looked up.
    effects = run_round(core, None, [_read()], 0.1).effects
    (first,) = _of(effects, ClaimCall)
    (lookup,) = _of(effects, Lookup)
    assert first.key.call_id == "call_0"
    assert lookup.key.call_id == "call_1"

    # No record: the second call is new, and waits for the slot.
    found = StoreAnswer(lookup, LookupResult(record=None, stale=False))
    assert _of(run_round(core, None, [found], 0.2).effects, ClaimCall) == []

    # Another live worker holds the first: it is left to that worker, and the slot is
    # free. The second (idempotent, found new) starts in the round its claim is sent.
    held = won_claim(first, 0.0).value
    assert isinstance(held, Claim)
    lost = StoreAnswer(first, Claim(won=False, record=replace(held.record, owner="worker-b")))
    effects = run_round(core, None, [lost], 0.3).effects
    (claim,) = _of(effects, ClaimCall)
    (run,) = _of(effects, RunFunction)
    assert claim.key == run.key == CallKey(SESSION, TURN, "call_1")

    # It ends before its claim is answered (its outcome waits for that answer)...
    event = success_event(claim.key, "reserved o")
    round_ = run_round(core, None, [FunctionOutcome(claim.key, event)], 0.4)
    assert round_.verdicts == {}
    assert core.calls[claim.key].phase is Phase.CLAIMING

    # ... and the store is down: the claim waits to be sent again. Nothing else of the
    # Session is left to do in this pass, so the serve returns (the next pass takes
    # the call up), as judging every serve says too.
    down = StoreAnswer(claim, error=StoreUnavailableError("down"))
    round_ = run_round(core, None, [down], 0.5)
    assert core.calls[claim.key].retry is not None
    assert core.may_finish(serve)
    assert round_.verdicts == {serve.id: None}
