"""The simulator in CI: thousands of faulty histories, and proof that it can fail."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator

import pytest

from openagentcore.runner._core import Call, RunnerCore, Serve
from openagentcore.store import CallKey, CallRecord

from ._soak import checked, default_jobs
from ._world import World, run_seed

#: Seeds every CI run replays; ``python -m tests.sim --seeds N`` soaks further.
CI_SEEDS = 2000


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    """The faults make the runner log a lot; none of it is a test failure."""
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)


def _first_violation(mutate: Callable[[RunnerCore], None] | None) -> int | None:
    for seed, _, broke_a_promise in checked(range(CI_SEEDS), jobs=default_jobs(), mutate=mutate):
        if broke_a_promise:
            return seed
    return None


@pytest.mark.slow
def test_every_ci_seed_keeps_the_runner_promises() -> None:
    failures = [
        f"seed {seed}: {error} (replay: python -m tests.sim --seed {seed})"
        for seed, error, _ in checked(range(CI_SEEDS), jobs=default_jobs())
        if error is not None
    ]
    assert not failures, "\n".join(failures[:10])


def test_a_history_replays_exactly_from_its_seed() -> None:
    first, second = run_seed(1234), run_seed(1234)
    assert first.runs == second.runs
    assert first.now == second.now
    assert _outcomes(first) == _outcomes(second)


def _outcomes(world: World) -> list[object]:
    """What the server holds at the end: every result, and how every Turn ended."""
    return [
        (session.results, [(turn.id, turn.status) for turn in session.turns])
        for session in world.server.sessions.values()
    ]


def _no_attempt_cap(core: RunnerCore) -> None:
    """Reverts defect 12's fix: idempotent calls in doubt are re-run without a cap."""
    functions = core.registry._functions
    for name, function in list(functions.items()):
        functions[name] = dataclasses.replace(function, max_attempts=10**6)


def _stale_claims_run_again(core: RunnerCore) -> None:
    """Reverts the in-doubt rule: a stale claim is taken as this runner's to run."""
    decide = core._decide_existing

    def decide_existing(call: Call, record: CallRecord, stale: bool, now: float) -> None:
        if stale and record.state.value == "started" and call.function is not None:
            core._hold(call, record, now, won=True)
            return
        decide(call, record, stale, now)

    core._decide_existing = decide_existing  # type: ignore[method-assign]


def _turn_ends_seen_early_are_forgotten(core: RunnerCore) -> None:
    """Reverts the fix for a Turn that ends before ``run_turn`` learns its id (a fast
    model): the ends its serve saw until then are dropped when it learns the id."""
    start_turn = core.start_turn

    def forgetful_start_turn(serve: Serve, turn_id: str, status: str, reconnects: int) -> None:
        serve.ends_by_turn.clear()
        start_turn(serve, turn_id, status, reconnects)

    core.start_turn = forgetful_start_turn  # type: ignore[method-assign]


def _refused_results_waited_out(core: RunnerCore) -> None:
    """Reverts run_turn's return of a Turn that waits on a refused result: it waits
    until its timeout instead, for an end only a person can bring."""
    core._refused_in_turn = lambda serve: []  # type: ignore[method-assign]


def _reruns_by_hand_ignored(core: RunnerCore) -> None:
    """Reverts the rule that a call cleared to run again by hand (``calls resolve
    --rerun``) runs again: it is treated as any call in doubt."""
    decide = core._decide_existing

    def decide_existing(call: Call, record: CallRecord, stale: bool, now: float) -> None:
        if record.settled_by == "manual:rerun":
            record = dataclasses.replace(record, settled_by=None)
        decide(call, record, stale, now)

    core._decide_existing = decide_existing  # type: ignore[method-assign]


def _lost_take_over_answers_not_recognised(core: RunnerCore) -> None:
    """Reverts the fix for a take-over whose answer was lost after it committed: its
    retry finds the record the first try wrote, and the runner takes that for a claim
    of its own nothing runs, and marks it in doubt."""
    core._unconfirmed = _ClaimsOnly()


class _ClaimsOnly(dict[CallKey, int]):
    """Remembers unconfirmed claims (attempt 1) but forgets unconfirmed take-overs."""

    def __setitem__(self, key: CallKey, attempts: int) -> None:
        if attempts == 1:
            super().__setitem__(key, attempts)


@pytest.mark.slow
@pytest.mark.parametrize(
    "mutation",
    [
        _lost_take_over_answers_not_recognised,
        _reruns_by_hand_ignored,
        _refused_results_waited_out,
        _no_attempt_cap,
        _stale_claims_run_again,
        _turn_ends_seen_early_are_forgotten,
    ],
)
def test_the_simulator_finds_a_reverted_fix_within_the_ci_budget(
    mutation: Callable[[RunnerCore], None],
) -> None:
    seed = _first_violation(mutation)
    assert seed is not None, f"{mutation.__name__} went unnoticed in {CI_SEEDS} seeds"


def test_functions_finish_after_their_timeout_in_some_histories() -> None:
    """Proof that the late-outcome check runs: timed-out calls whose function finished
    later keep their late outcome, checked against what the function produced."""
    kept = [
        record.late_outcome
        for seed in range(100)
        for record in run_seed(seed).store.find()
        if record.late_outcome is not None
    ]
    assert len(kept) >= 10
    assert any(late["success"] is True for late in kept)
    assert any(late["success"] is False for late in kept)  # ended without a result
