"""A function starts only under a claim the store confirms is still this worker's.

A worker cut off from the store lets its leases lapse; another worker then judges its
claims stale, marks them in doubt and answers the model "outcome unknown". If the first
worker started those calls after the heal, the effect would happen although the model
was told its outcome is unknown. So: claims are taken only when a concurrency slot is
free (they never wait behind ``max_concurrency``), a claim acknowledged late is renewed
(which checks it is still ours) before its function starts, and a renewal that finds
the claim lost stops the function from starting at all.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import pytest

from _tcp_proxy import postgres_proxy
from openagentcore.local import FunctionCall, LocalCore
from openagentcore.runner import CallContext, ServeReport, ServeTimeout
from openagentcore.runner._core import Phase, RunnerCore
from openagentcore.runner._effects import (
    Answers,
    ClaimCall,
    Effect,
    Lookup,
    LookupMany,
    LookupResult,
    MarkInDoubt,
    PostResults,
    RenewLeases,
    RunFunction,
    SessionOutcome,
    StoreAnswer,
    TakeOver,
)
from openagentcore.runner._registry import FunctionRegistry, describe_function
from openagentcore.store import (
    CallKey,
    CallState,
    Claim,
    PostgresResultStore,
    ResultStore,
    SQLiteResultStore,
    StoreCorruptError,
    StoreUnavailableError,
    UnknownCallError,
)
from openagentcore.store._sql import Transaction
from openagentcore.types import FunctionCallAction, Session

from ._support import Harness, applied_calls, one_turn, won_claim

SESSION = "sess_leases"
TURN = "turn_leases"
LEASE = 10.0
T = TypeVar("T")


def charge(amount: int) -> str:
    """Charge a card (not idempotent)."""
    return f"charged {amount}"


def _core(max_concurrency: int = 1) -> RunnerCore:
    registry = FunctionRegistry()
    registry.add(describe_function(charge))
    return RunnerCore(
        registry,
        owner="worker-a",
        lease_seconds=LEASE,
        max_concurrency=max_concurrency,
        unknown_functions="leave",
        poll_interval=1.0,
        in_doubt_hook=False,
        action_hook=False,
    )


def _announce(core: RunnerCore, calls: int, now: float) -> None:
    """A Session read that lists ``calls`` pending calls of ``charge``."""
    actions = [
        FunctionCallAction(
            turn_id=TURN, call_id=f"call_{n}", name="charge", arguments={"amount": n}
        )
        for n in range(calls)
    ]
    session = Session.model_construct(
        id=SESSION, status="requires_action", required_actions=actions, metadata={}, vault_ids=[]
    )
    serve = core.attach(SESSION, "idle", now)
    core.on_connected(serve, now)
    core.take_effects(now)
    core.on_session_read(SessionOutcome(SESSION, session), now)


def _of(effects: list[Effect], kind: type[T]) -> list[T]:
    return [effect for effect in effects if isinstance(effect, kind)]


def test_claims_are_taken_only_when_a_slot_is_free() -> None:
    core = _core(max_concurrency=1)
    _announce(core, 4, 0.0)

    claims = _of(core.take_effects(0.0), ClaimCall)

    assert [claim.key.call_id for claim in claims] == ["call_0"]
    core.on_store_answer(won_claim(claims[0], 0.0), 0.01)
    effects = core.take_effects(0.01)
    assert [run.key.call_id for run in _of(effects, RunFunction)] == ["call_0"]
    assert _of(effects, ClaimCall) == []  # the others are not claimed behind it


def test_a_claim_acknowledged_after_its_lease_lapsed_does_not_start_its_function() -> None:
    """The claim was sent at 0 and its COMMIT acknowledged at 12 (a lease of 10): meanwhile
    another worker judged it stale and marked it in doubt. It must not start."""
    core = _core()
    _announce(core, 1, 0.0)
    (claim,) = _of(core.take_effects(0.0), ClaimCall)

    core.on_store_answer(won_claim(claim, 0.0), LEASE + 2)
    effects = core.take_effects(LEASE + 2)

    assert _of(effects, RunFunction) == []
    (renewal,) = _of(effects, RenewLeases)
    assert renewal.keys == (claim.key,)
    # The other worker marked it in doubt: the renewal finds the claim lost.
    core.on_store_answer(StoreAnswer(renewal, (claim.key,)), LEASE + 2.1)
    assert _of(core.take_effects(LEASE + 2.1), RunFunction) == []
    assert claim.key not in core.calls


def test_a_claim_acknowledged_late_starts_once_a_renewal_confirms_it() -> None:
    core = _core()
    _announce(core, 1, 0.0)
    (claim,) = _of(core.take_effects(0.0), ClaimCall)
    core.on_store_answer(won_claim(claim, 0.0), LEASE + 2)
    (renewal,) = _of(core.take_effects(LEASE + 2), RenewLeases)

    core.on_store_answer(StoreAnswer(renewal, ()), LEASE + 2.1)

    (run,) = _of(core.take_effects(LEASE + 2.1), RunFunction)
    assert run.key == claim.key


def test_a_failed_confirmation_is_retried_later_and_never_starts_the_function() -> None:
    core = _core()
    _announce(core, 1, 0.0)
    (claim,) = _of(core.take_effects(0.0), ClaimCall)
    core.on_store_answer(won_claim(claim, 0.0), LEASE + 2)
    (renewal,) = _of(core.take_effects(LEASE + 2), RenewLeases)

    core.on_store_answer(StoreAnswer(renewal, error=StoreUnavailableError("down")), LEASE + 2.1)

    effects = core.take_effects(LEASE + 2.1)
    assert _of(effects, RunFunction) == []
    assert _of(effects, RenewLeases) == []  # not at once: the store is down
    assert _of(core.take_effects(LEASE + 3), RenewLeases) != []


# -- two workers, one store ----------------------------------------------------------------


class CutOffStore(SQLiteResultStore):
    """A SQLite store one worker reaches through a link that can be cut: while
    ``cut`` is set, every read and write fails as an unreachable database does."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.cut = threading.Event()

    def _check_link(self) -> None:
        if self.cut.is_set():
            raise StoreUnavailableError("test: this worker is cut off from the store")

    def _write(
        self,
        work: Callable[[Transaction], T],
        *,
        synced: bool = True,
        order: tuple[str, ...] | None = None,
    ) -> T:
        self._check_link()
        return super()._write(work, synced=synced, order=order)

    @contextlib.contextmanager
    def _reading(self) -> Iterator[Transaction]:
        self._check_link()
        with super()._reading() as transaction:
            yield transaction


RUNNER_COMBINATIONS = [("sync", "def"), ("async", "def")]
POSTGRES_DSN_ENV = "OPENAGENTCORE_TEST_POSTGRES_DSN"
CALLS = 4


def _two_workers(
    make_core: Callable[..., LocalCore],
    make_harness: Callable[..., Harness],
    store_a: ResultStore,
    store_b: ResultStore,
    cut: Callable[[], None],
    heal: Callable[[], None],
    lease_seconds: float,
) -> None:
    """Worker A (the runner under test) runs the first of four calls of a non-idempotent
    function with ``max_concurrency=1``, and is then cut off from the store (``cut``).
    Its lease lapses; worker B judges A's claims stale, marks them in doubt and answers
    the model "outcome unknown". After ``heal``, A must not start any call B answered
    so."""
    core = make_core(
        scenario=one_turn([FunctionCall("charge", {"amount": n}) for n in range(CALLS)])
    )
    worker_a = make_harness(
        core, store=store_a, lease_seconds=lease_seconds, max_concurrency=1, poll_interval=0.2
    )
    # A plays a worker on another machine: B judges its claims by their lease alone
    # (an open runner of B's own process would always be trusted to be alive).
    core_a = worker_a.runner._core
    core_a.owner = "worker-a-on-another-host"
    started_on_a: list[tuple[str, bool]] = []
    cut_off = threading.Event()
    healed = threading.Event()

    def claims_in_flight() -> bool:
        return any(call.phase is Phase.CLAIMING for call in list(core_a.calls.values()))

    def charge_on_a(amount: int, ctx: CallContext) -> str:
        """Charge a card (not idempotent)."""
        started_on_a.append((ctx.call_id, cut_off.is_set()))
        if not cut_off.is_set():
            # The cut comes once every claim A sent is answered, whatever A claims.
            _until(lambda: not claims_in_flight(), "A's claims to be answered")
            cut()
            cut_off.set()
            healed.wait(60)
        return f"charged {amount} on A"

    worker_a.runner.function(name="charge")(charge_on_a)
    session_id = worker_a.create_session()
    serving_a: list[ServeReport] = []
    serving = threading.Thread(
        target=lambda: serving_a.append(worker_a.serve(session_id, timeout=90)), daemon=True
    )
    serving.start()
    assert cut_off.wait(20), "worker A never started a call"

    worker_b = Harness(core, "sync", store=store_b, poll_interval=0.2)
    try:
        started_on_b: list[str] = []

        def charge_on_b(amount: int, ctx: CallContext) -> str:
            """Charge a card (not idempotent)."""
            started_on_b.append(ctx.call_id)
            return f"charged {amount} on B"

        worker_b.runner.function(name="charge")(charge_on_b)
        report_b = worker_b.serve(session_id, timeout=30)
    finally:
        worker_b.close()
    heal()
    healed.set()
    serving.join(90)
    assert serving_a, "worker A's serve did not end"

    in_doubt_by_b = {key.call_id for key in report_b.in_doubt}
    assert in_doubt_by_b, "B marked nothing in doubt: the scenario did not happen"
    started_after_the_cut = {call_id for call_id, late in started_on_a if late}
    assert started_after_the_cut & in_doubt_by_b == set(), (
        f"A started {sorted(started_after_the_cut)} after B answered "
        f"{sorted(in_doubt_by_b)} 'outcome unknown'"
    )
    # Every call got exactly one answer, and each ran at most once in all.
    runs = [call_id for call_id, _ in started_on_a] + started_on_b
    assert len(runs) == len(set(runs))
    calls = applied_calls(worker_a.client, session_id)
    assert len(calls) == CALLS
    assert all(applied.output is not None for applied in calls.values())


def test_calls_another_worker_answered_in_doubt_never_start_after_the_heal(
    make_core: Callable[..., LocalCore],
    make_harness: Callable[..., Harness],
    tmp_path: Path,
) -> None:
    """On a shared SQLite file, A's link to it failing (every operation raises)."""
    store_a = CutOffStore(tmp_path / "calls.db")
    _two_workers(
        make_core,
        make_harness,
        store_a,
        SQLiteResultStore(tmp_path / "calls.db"),
        cut=store_a.cut.set,
        heal=store_a.cut.clear,
        lease_seconds=1.0,
    )


@pytest.fixture
def pg_schema() -> Iterator[tuple[str, str]]:
    """``(dsn, schema)``: a schema of its own, dropped afterwards."""
    dsn = os.environ.get(POSTGRES_DSN_ENV)
    if not dsn:
        pytest.skip(f"set {POSTGRES_DSN_ENV} to run the PostgreSQL tests")
    import psycopg

    schema = f"oac_claims_{secrets.token_hex(4)}"
    yield dsn, schema
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.mark.postgres
def test_calls_another_worker_answered_in_doubt_never_start_after_a_partition_heals(
    make_core: Callable[..., LocalCore],
    make_harness: Callable[..., Harness],
    pg_schema: tuple[str, str],
) -> None:
    """On PostgreSQL, A reaching it through a network partition: A's requests and the
    server's answers wait while it lasts and arrive after the heal."""
    dsn, schema = pg_schema
    # As a fleet should be set up: a transaction whose client went silent does not hold
    # its row locks (and so every other worker) for as long as the partition lasts.
    partition, via_partition = postgres_proxy(
        dsn, options="-c idle_in_transaction_session_timeout=1000"
    )
    PostgresResultStore(dsn, schema=schema).close()  # create the table before the cut
    with partition:
        _two_workers(
            make_core,
            make_harness,
            PostgresResultStore(via_partition, schema=schema),
            PostgresResultStore(dsn, schema=schema),
            cut=partition.hold,
            heal=partition.heal,
            lease_seconds=2.0,
        )


# -- the store and the report are final when a serve runs out of time or the runner closes


def _one_call_session(
    make_core: Callable[..., LocalCore],
    make_harness: Callable[..., Harness],
    path: Path,
    body: Callable[[CallContext], None],
    **options: Any,
) -> tuple[Harness, str, list[CallContext]]:
    core = make_core(scenario=one_turn([FunctionCall("charge", {"amount": 5})]))
    harness = make_harness(core, store=SQLiteResultStore(path), **options)
    contexts: list[CallContext] = []

    def charge(amount: int, ctx: CallContext) -> str:
        """Charge a card (not idempotent)."""
        contexts.append(ctx)
        body(ctx)
        return f"charged {amount}"

    harness.runner.function(charge)
    return harness, harness.create_session(), contexts


def _state_in(path: Path, ctx: CallContext) -> CallState:
    store = SQLiteResultStore(path)
    try:
        record = store.get(CallKey(ctx.session_id, ctx.turn_id, ctx.call_id))
    finally:
        store.close()
    assert record is not None
    return record.state


def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 20
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_a_call_finishing_in_the_grace_is_reported_and_recorded_submitted(
    make_core: Callable[..., LocalCore],
    make_harness: Callable[..., Harness],
    tmp_path: Path,
) -> None:
    """The serve runs out of time while the function runs; the function ends in the
    grace and the server accepts its result. When ServeTimeout is raised, the report
    counts the call and the record says the result was submitted, even if the runner is
    closed at once."""
    path = tmp_path / "calls.db"
    made: list[Harness] = []

    def out_of_time(ctx: CallContext) -> None:
        _until(lambda: not made[0].runner._core.serves, "the serve to run out of time")

    harness, session_id, contexts = _one_call_session(
        make_core, make_harness, path, out_of_time, shutdown_grace=20
    )
    made.append(harness)
    with pytest.raises(ServeTimeout) as raised:
        harness.serve(session_id, timeout=2)
    harness.close()

    assert len(contexts) == 1, "the function did not start before the serve's timeout"
    assert raised.value.report.calls_run == 1
    assert _state_in(path, contexts[0]) in (CallState.SUBMITTED, CallState.APPLIED)


def test_close_waits_for_the_result_of_a_call_a_timed_out_serve_left(
    make_core: Callable[..., LocalCore],
    make_harness: Callable[..., Harness],
    tmp_path: Path,
) -> None:
    """The serve's grace ends with the function still running; it ends afterwards, and
    ``close()`` returns only once its result is posted and recorded as submitted."""
    path = tmp_path / "calls.db"
    released = threading.Event()
    harness, session_id, contexts = _one_call_session(
        make_core, make_harness, path, lambda ctx: released.wait(30), shutdown_grace=3
    )
    with pytest.raises(ServeTimeout):
        harness.serve(session_id, timeout=1)
    assert len(contexts) == 1, "the function did not start before the serve's timeout"
    released.set()
    harness.close()

    assert _state_in(path, contexts[0]) in (CallState.SUBMITTED, CallState.APPLIED)


def reserve(seat: int) -> str:
    """Reserve a seat (idempotent: reserving twice holds one seat)."""
    return f"reserved {seat}"


def _lost_to(effect: ClaimCall, state: CallState, now: float) -> StoreAnswer:
    """The claim lost to another worker's record of attempt 1, stale by the store's clock."""
    won = won_claim(effect, now - 2 * LEASE).value
    assert isinstance(won, Claim)
    record = replace(won.record, owner="worker-b", state=state)
    return StoreAnswer(effect, Claim(won=False, record=record, stale=True))


@pytest.mark.parametrize("step", ["mark_in_doubt", "take_over"])
def test_a_record_that_vanishes_under_a_compare_and_set_is_claimed_afresh(step: str) -> None:
    """Another worker gave back a claim it never ran (the record is deleted) while this one
    was marking that claim in doubt, or taking the call over: the store finds no record.
    Nobody holds the call, so it is read again and claimed afresh. Before the fix the
    core treated the missing record as a result the store can never hold and moved the
    call to posting a failure (from ``marking_in_doubt``, an ``IllegalMove``; simulator
    seed 1947 once a claim's failure stopped delaying the Session's next read)."""
    registry = FunctionRegistry()
    registry.add(describe_function(charge))
    registry.add(describe_function(reserve, idempotent=True))
    core = RunnerCore(
        registry,
        owner="worker-a",
        lease_seconds=LEASE,
        max_concurrency=1,
        unknown_functions="leave",
        poll_interval=1.0,
        in_doubt_hook=False,
        action_hook=False,
    )
    name, arguments = (
        ("charge", {"amount": 0}) if step == "mark_in_doubt" else ("reserve", {"seat": 0})
    )
    action = FunctionCallAction(turn_id=TURN, call_id="call_0", name=name, arguments=arguments)
    session = Session.model_construct(
        id=SESSION, status="requires_action", required_actions=[action], metadata={}, vault_ids=[]
    )
    serve = core.attach(SESSION, "idle", 0.0)
    core.on_connected(serve, 0.0)
    core.take_effects(0.0)
    core.on_session_read(SessionOutcome(SESSION, session), 0.0)
    (claim,) = _of(core.take_effects(0.0), ClaimCall)
    lost_state = CallState.STARTED if step == "mark_in_doubt" else CallState.IN_DOUBT
    core.on_store_answer(_lost_to(claim, lost_state, 0.1), 0.1)
    kind: type[MarkInDoubt | TakeOver] = MarkInDoubt if step == "mark_in_doubt" else TakeOver
    (compare_and_set,) = _of(core.take_effects(0.1), kind)  # type: ignore[type-abstract]

    vanished = UnknownCallError(f"no record of {claim.key!r}; claim the call first")
    core.on_store_answer(StoreAnswer(compare_and_set, error=vanished), 0.2)
    effects = core.take_effects(0.2)

    assert _of(effects, PostResults) == []
    assert [lookup.key for lookup in _of(effects, Lookup)] == [claim.key]
    core.on_store_answer(StoreAnswer(_of(effects, Lookup)[0], LookupResult(None, stale=False)), 0.3)
    assert [again.key for again in _of(core.take_effects(0.3), ClaimCall)] == [claim.key]


def test_calls_a_read_lists_beyond_the_free_slots_are_looked_up_not_left_waiting() -> None:
    """A restart reads its Sessions and finds thousands of calls whose results it saved
    before: waiting for a slot only for a claim to find each saved result resubmitted
    them a slot's worth at a time (10,000 took 25 s). Calls beyond the free slots are
    looked up at once; a saved result goes out without a slot."""
    core = _core(max_concurrency=1)
    _announce(core, 3, 0.0)

    effects = core.take_effects(0.0)

    assert [claim.key.call_id for claim in _of(effects, ClaimCall)] == ["call_0"]
    (batch,) = _of(effects, LookupMany)  # the round's lookups, in one read
    lookups = batch.lookups
    assert [lookup.key.call_id for lookup in lookups] == ["call_1", "call_2"]
    saved = won_claim(_of(effects, ClaimCall)[0], 0.0).value
    assert isinstance(saved, Claim)
    event = {"type": "agent.session.input.tool_result", "turn_id": TURN, "success": True}
    with_result = replace(
        saved.record,
        key=lookups[0].key,
        state=CallState.COMPLETED,
        result={**event, "call_id": "call_1", "output": "charged 1"},
        owner="worker-gone",
    )
    answers = Answers(
        (
            StoreAnswer(lookups[0], LookupResult(with_result, stale=False)),
            StoreAnswer(lookups[1], LookupResult(None, stale=False)),
        )
    )
    core.on_store_answer(StoreAnswer(batch, answers), 0.01)
    effects = core.take_effects(0.5)  # past the linger for other results of the Session
    posted = [r.key.call_id for e in _of(effects, PostResults) for r in e.batch.records]
    assert posted == ["call_1"]  # resubmitted while call_0 holds the only slot
    assert _of(effects, ClaimCall) == []  # call_2 has no record: it waits for the slot


def test_a_batch_of_lookups_is_answered_call_by_call() -> None:
    """A round's lookups go to the store as one ``LookupMany`` (issue 26). A store that
    cannot be reached fails the batch as a whole: each call waits for the store and is
    looked up again (again together); an error of one lookup in the batch's answers (a
    damaged row) is that call's alone, and the others go on."""
    core = _core(max_concurrency=1)
    _announce(core, 4, 0.0)
    effects = core.take_effects(0.0)
    (batch,) = _of(effects, LookupMany)
    saved = won_claim(_of(effects, ClaimCall)[0], 0.0).value
    assert isinstance(saved, Claim)
    assert [lookup.key.call_id for lookup in batch.lookups] == ["call_1", "call_2", "call_3"]

    core.on_store_answer(StoreAnswer(batch, error=StoreUnavailableError("down")), 0.01)
    assert _of(core.take_effects(0.01), LookupMany) == []  # nothing until the backoff ends
    (again,) = _of(core.take_effects(60.0), LookupMany)
    assert again.lookups == batch.lookups

    event = {"type": "agent.session.input.tool_result", "turn_id": TURN, "success": True}
    record = replace(
        saved.record,
        key=again.lookups[0].key,
        state=CallState.COMPLETED,
        result={**event, "call_id": "call_1", "output": "charged 1"},
        owner="worker-gone",
    )
    damaged = StoreCorruptError("the row of call 'call_2' cannot be read")
    answers = Answers(
        (
            StoreAnswer(again.lookups[0], LookupResult(record, stale=False)),
            StoreAnswer(again.lookups[1], error=damaged),
            StoreAnswer(again.lookups[2], LookupResult(None, stale=False)),
        )
    )
    core.on_store_answer(StoreAnswer(again, answers), 60.01)
    effects = core.take_effects(61.0)

    posted = {r.key.call_id: r.result for e in _of(effects, PostResults) for r in e.batch.records}
    assert set(posted) == {"call_1", "call_2"}  # a saved result, and the damaged row's failure
    assert posted["call_1"] == record.result
    failure = posted["call_2"]
    assert failure is not None
    assert failure["success"] is False
    assert core.calls[again.lookups[2].key].phase is Phase.WAITING  # no record: its slot next
