"""The idempotent fast path, driven message by message through the core (issue 26).

A function declared ``idempotent=True`` may run again after a crash anyway, so its run
does not wait for its claim to be durable, nor its POST for its save. What must still
hold: the outcome of a run whose claim was lost is never posted by this runner, and
this runner never posts two different results for one call.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, TypeVar

from openagentcore.runner._core import Phase, RunnerCore
from openagentcore.runner._effects import (
    Batch,
    CancelFunction,
    ClaimCall,
    Effect,
    FunctionOutcome,
    KeepLateOutcome,
    PostOutcome,
    PostResults,
    RunFunction,
    SaveResult,
    SessionOutcome,
    StoreAnswer,
    WriteMarks,
)
from openagentcore.runner._registry import FunctionRegistry, describe_function
from openagentcore.runner._results import success_event
from openagentcore.store import CallKey, CallRecord, CallState, Claim, StoreUnavailableError
from openagentcore.types import FunctionCallAction, Session

from ._support import won_claim

SESSION = "sess_fast"
TURN = "turn_fast"
LEASE = 10.0
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
        lease_seconds=LEASE,
        max_concurrency=4,
        unknown_functions="leave",
        poll_interval=1.0,
        in_doubt_hook=False,
        action_hook=False,
        idempotent_fast_path=True,
    )


def _read(core: RunnerCore, names: list[str], now: float) -> None:
    actions = [
        FunctionCallAction(turn_id=TURN, call_id=f"call_{n}", name=name, arguments={"order": "o"})
        for n, name in enumerate(names)
    ]
    status = "requires_action" if actions else "in_progress"
    session = Session.model_construct(
        id=SESSION, status=status, required_actions=actions, metadata={}, vault_ids=[]
    )
    core.on_session_read(SessionOutcome(SESSION, session), now)


def _serve(core: RunnerCore, *, first: list[str], then: list[str]) -> list[Effect]:
    """A serve whose first read lists ``first`` and whose next lists ``then`` too; the
    effects of that next round."""
    serve = core.attach(SESSION, "idle", 0.0)
    core.on_connected(serve, 0.0)
    core.take_effects(0.0)
    _read(core, first, 0.0)
    core.take_effects(0.0)
    _read(core, first + then, 0.1)
    return core.take_effects(0.1)


def _of(effects: list[Effect], kind: type[T]) -> list[T]:
    return [effect for effect in effects if isinstance(effect, kind)]


def _event(name: str = "reserve", output: str = "reserved o", call: int = 0) -> dict[str, Any]:
    return success_event(CallKey(SESSION, TURN, f"call_{call}"), output)


def _lost(effect: ClaimCall) -> StoreAnswer:
    """Another live worker holds the call."""
    record = won_claim(effect, 0.0).value
    assert isinstance(record, Claim)
    return StoreAnswer(effect, Claim(won=False, record=replace(record.record, owner="worker-b")))


def _saved(effect: SaveResult, result: dict[str, Any]) -> StoreAnswer:
    record = CallRecord(
        key=effect.key,
        function_name="reserve",
        arguments_hash="",
        state=CallState.COMPLETED,
        result=result,
        idempotency_key="oac-test",
        attempts=1,
        owner="worker-a",
        lease_expires_at=None,
        created_at=0.0,
        updated_at=0.0,
    )
    return StoreAnswer(effect, record)


def test_an_idempotent_call_starts_in_the_round_its_claim_is_sent() -> None:
    core = _core()
    effects = _serve(core, first=[], then=["reserve"])
    (claim,) = _of(effects, ClaimCall)
    (run,) = _of(effects, RunFunction)
    assert run.key == claim.key
    assert run.attempt == 1
    assert core.calls[claim.key].phase is Phase.RUNNING


def test_nothing_changes_for_a_function_that_is_not_idempotent() -> None:
    core = _core()
    effects = _serve(core, first=[], then=["charge"])
    assert len(_of(effects, ClaimCall)) == 1
    assert _of(effects, RunFunction) == []


def test_a_call_pending_before_the_runner_followed_the_session_waits_for_its_claim() -> None:
    """A crashed runner may have left it in doubt: running it before the claim's answer
    would run it once more for nothing."""
    core = _core()
    serve = core.attach(SESSION, "idle", 0.0)
    core.on_connected(serve, 0.0)
    core.take_effects(0.0)
    _read(core, ["reserve"], 0.0)
    effects = core.take_effects(0.0)
    assert len(_of(effects, ClaimCall)) == 1
    assert _of(effects, RunFunction) == []


def test_a_won_claim_then_the_outcome_saves_and_posts_in_one_round() -> None:
    core = _core()
    (claim,) = _of(_serve(core, first=[], then=["reserve"]), ClaimCall)
    core.on_store_answer(won_claim(claim, 0.1), 0.11)
    assert core.take_effects(0.11) == []
    core.on_function_done(FunctionOutcome(claim.key, _event()), 0.2)
    effects = core.take_effects(0.2)
    (save,) = _of(effects, SaveResult)
    (post,) = _of(effects, PostResults)
    assert save.event == _event()
    assert post.batch.events == [_event()]


def test_an_outcome_before_its_claim_answer_waits_for_it() -> None:
    core = _core()
    (claim,) = _of(_serve(core, first=[], then=["reserve"]), ClaimCall)
    core.on_function_done(FunctionOutcome(claim.key, _event()), 0.2)
    assert _of(core.take_effects(0.2), SaveResult | PostResults) == []  # type: ignore[arg-type]
    core.on_store_answer(won_claim(claim, 0.1), 0.3)
    effects = core.take_effects(0.3)
    assert len(_of(effects, SaveResult)) == 1
    assert len(_of(effects, PostResults)) == 1


def test_a_lost_claim_stops_the_run_and_its_outcome_is_never_posted() -> None:
    core = _core()
    (claim,) = _of(_serve(core, first=[], then=["reserve"]), ClaimCall)
    core.on_store_answer(_lost(claim), 0.15)
    assert _of(core.take_effects(0.15), CancelFunction) == [CancelFunction(claim.key)]
    assert core._running == 1  # its slot is kept until the function returns
    core.on_function_done(FunctionOutcome(claim.key, _event()), 0.2)
    effects = core.take_effects(0.2)
    assert _of(effects, SaveResult) == []
    assert _of(effects, PostResults) == []
    assert core._running == 0


def test_a_lost_claim_drops_an_outcome_that_came_first() -> None:
    core = _core()
    (claim,) = _of(_serve(core, first=[], then=["reserve"]), ClaimCall)
    core.on_function_done(FunctionOutcome(claim.key, _event()), 0.12)
    core.on_store_answer(_lost(claim), 0.15)
    effects = core.take_effects(0.15)
    assert _of(effects, SaveResult) == []
    assert _of(effects, PostResults) == []
    assert _of(effects, KeepLateOutcome) == []


def test_a_claim_the_store_could_not_answer_is_sent_again_and_the_outcome_waits() -> None:
    core = _core()
    (claim,) = _of(_serve(core, first=[], then=["reserve"]), ClaimCall)
    core.on_store_answer(StoreAnswer(claim, error=StoreUnavailableError("down")), 0.12)
    core.on_function_done(FunctionOutcome(claim.key, _event()), 0.13)
    assert _of(core.take_effects(0.13), PostResults) == []
    retried = _of(core.take_effects(10.0), ClaimCall)
    assert retried == [claim]
    core.on_store_answer(won_claim(claim, 10.0), 10.01)
    effects = core.take_effects(10.01)
    assert len(_of(effects, SaveResult)) == 1
    assert len(_of(effects, PostResults)) == 1


def _posted(core: RunnerCore) -> tuple[SaveResult, PostResults]:
    (claim,) = _of(_serve(core, first=[], then=["reserve"]), ClaimCall)
    core.on_store_answer(won_claim(claim, 0.1), 0.11)
    core.on_function_done(FunctionOutcome(claim.key, _event()), 0.2)
    effects = core.take_effects(0.2)
    (save,) = _of(effects, SaveResult)
    (post,) = _of(effects, PostResults)
    return save, post


def _marked(effects: list[Effect]) -> list[tuple[CallKey, CallState]]:
    return [change for marks in _of(effects, WriteMarks) for change in marks.changes]


def test_a_progress_mark_waits_for_the_save() -> None:
    core = _core()
    save, post = _posted(core)
    core.on_posted(PostOutcome(post.batch, None), 0.25)
    assert _marked(core.take_effects(5.0)) == []
    core.on_store_answer(_saved(save, _event()), 5.0)
    assert _marked(core.take_effects(10.0)) == [(save.key, CallState.SUBMITTED)]


def test_a_save_that_finds_another_result_keeps_the_posted_one() -> None:
    """Another worker ran it again and saved first: the result this runner posted is
    the only one it ever posts for the call (the server keeps the first it got), and it
    is kept beside the record; no progress mark claims the record's result was sent."""
    core = _core()
    save, post = _posted(core)
    other = _event(output="reserved o (again)")
    core.on_store_answer(_saved(save, other), 0.22)
    effects = core.take_effects(0.22)
    assert _of(effects, KeepLateOutcome) == [KeepLateOutcome(save.key, _event())]
    core.on_posted(PostOutcome(post.batch, ConnectionError("lost")), 0.3)
    resent = [p.batch for p in _of(core.take_effects(60.0), PostResults)]
    assert resent == [Batch(SESSION, post.batch.records)]
    core.on_posted(PostOutcome(post.batch, None), 60.1)
    assert _marked(core.take_effects(120.0)) == []


def test_a_call_whose_own_claim_may_have_committed_waits_for_its_claim() -> None:
    """A claim the store failed may have committed: the call is forgotten, and a later
    read announces it again. Its claim then finds this runner's own record, with a lease
    of unknown age (another worker may judge it stale meanwhile), not a new one: the
    function waits for the answer and a renewal, as any claim of ours found committed
    does, rather than start with the claim."""
    core = _core()
    serve = core.attach(SESSION, "idle", 0.0)
    core.on_connected(serve, 0.0)
    core.take_effects(0.0)
    _read(core, ["reserve"], 0.0)
    (claim,) = _of(core.take_effects(0.0), ClaimCall)
    core.on_store_answer(StoreAnswer(claim, error=StoreUnavailableError("read, then lost")), 0.1)
    assert claim.key not in core.calls  # forgotten, for a later read to decide
    _read(core, ["reserve"], 5.0)  # a later read: the call is new to the snapshot count
    effects = core.take_effects(5.0)
    assert _of(effects, ClaimCall) == [claim]
    assert _of(effects, RunFunction) == []
    assert core.calls[claim.key].phase is Phase.CLAIMING
