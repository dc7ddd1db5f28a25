"""The behaviour every ResultStore must share, run against memory, SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from openagentcore.store import (
    PRUNABLE_STATES,
    SETTLED_STATES,
    CallKey,
    CallState,
    InvalidTransitionError,
    ResultStore,
    StoreClosedError,
    UnknownCallError,
    idempotency_key_for,
)
from openagentcore.store._records import process_host

from ._support import FakeClock, StoreSpec, dead_owner

KEY = CallKey("sess_1", "turn_1", "call_1")
LEASE = 30.0
T = TypeVar("T")


def claim(store: ResultStore, owner: str = "host:1:a", key: CallKey = KEY) -> Any:
    return store.claim(
        key, function_name="get_weather", arguments_hash="abc", owner=owner, lease_seconds=LEASE
    )


def race(count: int, action: Callable[[int], T]) -> list[T]:
    """Run ``action(i)`` in ``count`` threads released at the same moment."""
    barrier = threading.Barrier(count)
    results: list[T] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run(index: int) -> None:
        try:
            barrier.wait(timeout=30)
            outcome = action(index)
            with lock:
                results.append(outcome)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    assert len(results) == count
    return results


EVENT: dict[str, Any] = {
    "type": "agent.session.input.tool_result",
    "call_id": "call_1",
    "output": "Sunny, 21 °C",
    "is_error": False,
    "metadata": None,  # present-but-null must survive the round trip
    "content": [{"type": "text", "text": "naïve ☀"}, {"n": 1.5, "big": 2**53}],
}


# -- claim ------------------------------------------------------------------------------


def test_first_claim_wins_and_inserts_a_started_record(
    store: ResultStore, clock: FakeClock
) -> None:
    result = claim(store)

    assert result.won
    record = result.record
    assert record.key == KEY
    assert record.state is CallState.STARTED
    assert (record.function_name, record.arguments_hash) == ("get_weather", "abc")
    assert (record.attempts, record.owner) == (1, "host:1:a")
    assert record.lease_expires_at == clock.now + LEASE
    assert record.created_at == record.updated_at == clock.now
    assert record.idempotency_key == idempotency_key_for(KEY)
    assert not record.has_result()
    assert store.get(KEY) == record


def test_later_claims_lose_and_see_the_stored_record(store: ResultStore) -> None:
    claim(store, owner="host:1:a")
    store.save_result(KEY, EVENT, owner="host:1:a")

    loser = claim(store, owner="host:2:b")

    assert not loser.won
    assert loser.record.owner == "host:1:a"
    assert loser.record.state is CallState.COMPLETED
    assert loser.record.result == EVENT


def test_threads_racing_to_claim_produce_exactly_one_winner_per_key(
    store: ResultStore,
) -> None:
    keys = [CallKey("sess_r", "turn", f"call_{i}") for i in range(15)]

    def claim_all(index: int) -> list[CallKey]:
        owner = f"host:{index}:t"
        return [key for key in keys if claim(store, owner=owner, key=key).won]

    wins = Counter(key for won in race(8, claim_all) for key in won)

    assert wins == Counter(keys)


def test_a_lost_claim_says_whether_the_record_is_stale(
    store: ResultStore, clock: FakeClock
) -> None:
    claim(store, owner="far:1:a")

    assert claim(store, owner="far:2:b").stale is False
    clock.advance(LEASE)
    lost = claim(store, owner="far:2:b")
    assert (lost.won, lost.stale) == (False, True)
    assert lost.record.owner == "far:1:a"

    store.save_result(KEY, EVENT, owner=None)
    assert claim(store, owner="far:2:b").stale is False  # a saved result is never stale


def test_a_lost_claim_on_a_dead_owner_is_stale(store: ResultStore) -> None:
    claim(store, owner=dead_owner())

    assert claim(store, owner="far:2:b").stale is True


def test_claim_rejects_a_non_positive_lease(store: ResultStore) -> None:
    with pytest.raises(ValueError, match="lease_seconds"):
        store.claim(KEY, function_name="f", arguments_hash="h", owner="o", lease_seconds=0)
    assert store.get(KEY) is None


# -- results --------------------------------------------------------------------------


def test_saved_result_round_trips_exactly(store: ResultStore, clock: FakeClock) -> None:
    claim(store)
    clock.advance(2)

    saved = store.save_result(KEY, EVENT, owner="host:1:a")

    assert saved.state is CallState.COMPLETED
    assert saved.result == EVENT
    assert "metadata" in saved.result
    assert saved.lease_expires_at is None
    assert saved.updated_at == clock.now
    assert store.get(KEY) == saved


def test_a_saved_result_is_never_overwritten(store: ResultStore) -> None:
    claim(store)
    first = store.save_result(KEY, EVENT, owner="host:1:a")

    second = store.save_result(KEY, {**EVENT, "output": "Rain"}, owner="host:2:b")

    assert second == first
    stored = store.get(KEY)
    assert stored is not None
    assert stored.result == EVENT
    assert stored.owner == "host:1:a"


def test_concurrent_saves_keep_exactly_one_result(store: ResultStore) -> None:
    claim(store)

    returned = race(6, lambda i: store.save_result(KEY, {**EVENT, "output": i}, owner=None))

    stored = store.get(KEY)
    assert stored is not None
    assert stored.result is not None
    assert {record.result["output"] for record in returned if record.result} == {
        stored.result["output"]
    }


def test_records_handed_out_are_copies(store: ResultStore) -> None:
    claim(store)
    payload: dict[str, Any] = {"type": "agent.session.input.tool_result", "output": ["a"]}
    saved = store.save_result(KEY, payload, owner=None)

    payload["output"].append("mutated by caller")
    assert saved.result is not None
    saved.result["output"].append("mutated by reader")

    stored = store.get(KEY)
    assert stored is not None
    assert stored.result == {"type": "agent.session.input.tool_result", "output": ["a"]}


def test_a_result_that_is_not_json_is_refused_before_writing(store: ResultStore) -> None:
    claim(store)

    with pytest.raises(TypeError, match="JSON"):
        store.save_result(KEY, {"output": object()}, owner=None)
    with pytest.raises(TypeError, match="JSON"):
        store.save_result(KEY, {"output": float("nan")}, owner=None)

    record = store.get(KEY)
    assert record is not None
    assert record.state is CallState.STARTED


def test_an_abandoned_call_accepts_no_late_result(store: ResultStore) -> None:
    claim(store)
    store.mark(KEY, CallState.ABANDONED)

    record = store.save_result(KEY, EVENT, owner="host:1:a")

    assert record.state is CallState.ABANDONED
    assert record.result is None


def test_an_in_doubt_call_can_still_save_its_result(store: ResultStore) -> None:
    claim(store)
    store.mark(KEY, CallState.IN_DOUBT)

    record = store.save_result(KEY, EVENT, owner="host:1:a")

    assert record.state is CallState.COMPLETED
    assert record.result == EVENT


@pytest.mark.parametrize(
    "operation",
    [
        pytest.param(lambda s: s.save_result(KEY, EVENT, owner=None), id="save_result"),
        pytest.param(lambda s: s.mark(KEY, CallState.APPLIED), id="mark"),
        pytest.param(
            lambda s: s.take_over(KEY, owner="o", lease_seconds=1, expected_attempts=1),
            id="take_over",
        ),
    ],
)
def test_changing_an_unknown_call_raises(
    store: ResultStore, operation: Callable[[ResultStore], object]
) -> None:
    with pytest.raises(UnknownCallError, match="claim"):
        operation(store)


# -- state transitions ----------------------------------------------------------------


def _at_state(store: ResultStore, state: CallState) -> None:
    """Bring KEY to ``state`` the way a runner would."""
    claim(store)
    if state is CallState.STARTED:
        return
    if state is CallState.IN_DOUBT:
        store.mark(KEY, CallState.IN_DOUBT)
        return
    if state is CallState.ABANDONED:
        store.mark(KEY, CallState.ABANDONED)
        return
    store.save_result(KEY, EVENT, owner="host:1:a")
    if state in (CallState.SUBMITTED, CallState.APPLIED):
        store.mark(KEY, state)
    if state is CallState.REJECTED:
        store.mark(KEY, CallState.SUBMITTED)
        store.mark(KEY, CallState.REJECTED)


S = CallState
# (from, mark(to)) -> resulting state; everything not listed below is rejected.
MOVES: dict[tuple[CallState, CallState], CallState] = {
    (S.STARTED, S.IN_DOUBT): S.IN_DOUBT,
    (S.STARTED, S.ABANDONED): S.ABANDONED,
    (S.IN_DOUBT, S.IN_DOUBT): S.IN_DOUBT,
    (S.IN_DOUBT, S.ABANDONED): S.ABANDONED,
    (S.COMPLETED, S.IN_DOUBT): S.COMPLETED,
    (S.COMPLETED, S.SUBMITTED): S.SUBMITTED,
    (S.COMPLETED, S.APPLIED): S.APPLIED,
    (S.COMPLETED, S.ABANDONED): S.ABANDONED,
    (S.SUBMITTED, S.IN_DOUBT): S.SUBMITTED,
    (S.SUBMITTED, S.SUBMITTED): S.SUBMITTED,
    (S.SUBMITTED, S.APPLIED): S.APPLIED,
    (S.SUBMITTED, S.ABANDONED): S.ABANDONED,
    (S.COMPLETED, S.REJECTED): S.REJECTED,
    (S.SUBMITTED, S.REJECTED): S.REJECTED,
    # A refused result is settled only by hand or by the server: applied or abandoned.
    (S.REJECTED, S.IN_DOUBT): S.REJECTED,
    (S.REJECTED, S.SUBMITTED): S.REJECTED,
    (S.REJECTED, S.REJECTED): S.REJECTED,
    (S.REJECTED, S.APPLIED): S.APPLIED,
    (S.REJECTED, S.ABANDONED): S.ABANDONED,
    **{(S.APPLIED, to): S.APPLIED for to in (S.IN_DOUBT, S.SUBMITTED, S.APPLIED, S.ABANDONED)},
    **{(S.ABANDONED, to): S.ABANDONED for to in (S.IN_DOUBT, S.SUBMITTED, S.APPLIED, S.ABANDONED)},
    (S.APPLIED, S.REJECTED): S.APPLIED,
    (S.ABANDONED, S.REJECTED): S.ABANDONED,
}
NEEDS_RESULT = {(S.STARTED, S.SUBMITTED), (S.STARTED, S.APPLIED), (S.STARTED, S.REJECTED)}
NEEDS_RESULT |= {(S.IN_DOUBT, S.SUBMITTED), (S.IN_DOUBT, S.APPLIED), (S.IN_DOUBT, S.REJECTED)}


@pytest.mark.parametrize(("start", "target"), sorted(MOVES, key=str))
def test_mark_moves_forward_and_never_backwards(
    store: ResultStore, start: CallState, target: CallState
) -> None:
    _at_state(store, start)
    before = store.get(KEY)

    store.mark(KEY, target)

    after = store.get(KEY)
    assert after is not None
    assert before is not None
    assert after.state is MOVES[start, target]
    assert after.result == before.result


@pytest.mark.parametrize(("start", "target"), sorted(NEEDS_RESULT, key=str))
def test_mark_submitted_applied_or_rejected_needs_a_saved_result(
    store: ResultStore, start: CallState, target: CallState
) -> None:
    _at_state(store, start)

    with pytest.raises(InvalidTransitionError, match="save_result"):
        store.mark(KEY, target)

    record = store.get(KEY)
    assert record is not None
    assert record.state is start


@pytest.mark.parametrize("target", [CallState.STARTED, CallState.COMPLETED])
def test_mark_refuses_states_owned_by_other_methods(store: ResultStore, target: CallState) -> None:
    claim(store)

    with pytest.raises(InvalidTransitionError, match=r"take_over|save_result"):
        store.mark(KEY, target)


def test_a_rejected_call_keeps_its_result_and_is_never_pruned(
    store: ResultStore, clock: FakeClock
) -> None:
    """Issue 11, defect 3: a refused result was stored as abandoned and pruned while the
    call was still pending on the server, so the next runner ran it again."""
    _at_state(store, CallState.REJECTED)
    clock.advance(365 * 24 * 3600)

    assert store.prune(older_than=0) == 0

    record = store.get(KEY)
    assert record is not None
    assert (record.state, record.result) == (CallState.REJECTED, EVENT)
    assert not store.is_stale(record)
    # Nobody may run it again or replace its result.
    assert not store.take_over(KEY, owner="host:2:b", lease_seconds=LEASE, expected_attempts=1).won
    assert store.save_result(KEY, {"type": "other"}, owner=None).result == EVENT
    assert not claim(store, owner="host:2:b").won


def test_rejected_calls_are_found_by_state(store: ResultStore) -> None:
    _at_state(store, CallState.REJECTED)

    assert [r.key for r in store.find(states=[CallState.REJECTED])] == [KEY]
    assert CallState.REJECTED not in SETTLED_STATES | PRUNABLE_STATES


# -- mark_in_doubt ----------------------------------------------------------------------


def test_mark_in_doubt_by_the_owner_of_the_attempt(store: ResultStore) -> None:
    claim(store)

    assert not store.mark_in_doubt(KEY, owner="host:1:a", expected_attempts=2)
    assert store.mark_in_doubt(KEY, owner="host:1:a", expected_attempts=1)

    record = store.get(KEY)
    assert record is not None
    assert (record.state, record.attempts) == (CallState.IN_DOUBT, 1)
    # Already in doubt: nothing left to change.
    assert not store.mark_in_doubt(KEY, owner="host:1:a", expected_attempts=1)


def test_mark_in_doubt_spares_a_live_claim_of_another_owner(
    store: ResultStore, clock: FakeClock
) -> None:
    """Issue 11, defect 10: mark(IN_DOUBT) took any started record, even one another
    worker was still running."""
    claim(store, owner="far:1:a")

    assert not store.mark_in_doubt(KEY, owner="far:2:b", expected_attempts=1)
    clock.advance(LEASE - 1)
    assert not store.mark_in_doubt(KEY, owner="far:2:b", expected_attempts=1)
    record = store.get(KEY)
    assert record is not None
    assert record.state is CallState.STARTED

    clock.advance(1)  # the lease has run out: the claim is stale
    assert store.mark_in_doubt(KEY, owner="far:2:b", expected_attempts=1)


def test_mark_in_doubt_of_a_dead_owner_before_its_lease_ends(store: ResultStore) -> None:
    claim(store, owner=dead_owner())

    assert store.mark_in_doubt(KEY, owner="far:2:b", expected_attempts=1)


def test_mark_in_doubt_misses_a_newer_attempt(store: ResultStore, clock: FakeClock) -> None:
    claim(store, owner="far:1:a")
    clock.advance(LEASE)
    assert store.take_over(KEY, owner="far:2:b", lease_seconds=LEASE, expected_attempts=1).won

    # The first owner's view is out of date: the second attempt is live.
    assert not store.mark_in_doubt(KEY, owner="far:1:a", expected_attempts=1)
    record = store.get(KEY)
    assert record is not None
    assert (record.state, record.owner, record.attempts) == (CallState.STARTED, "far:2:b", 2)


def test_mark_in_doubt_leaves_a_call_with_a_result(store: ResultStore, clock: FakeClock) -> None:
    claim(store)
    store.save_result(KEY, EVENT, owner=None)
    clock.advance(LEASE * 2)

    assert not store.mark_in_doubt(KEY, owner="host:1:a", expected_attempts=1)
    record = store.get(KEY)
    assert record is not None
    assert record.state is CallState.COMPLETED


def test_mark_in_doubt_of_an_unknown_call_raises(store: ResultStore) -> None:
    with pytest.raises(UnknownCallError, match="claim"):
        store.mark_in_doubt(KEY, owner="host:1:a", expected_attempts=1)


# -- release ----------------------------------------------------------------------------


def test_releasing_a_first_claim_leaves_no_record(store: ResultStore) -> None:
    claim(store)

    assert not store.release(KEY, owner="host:2:b")
    assert store.release(KEY, owner="host:1:a")

    assert store.get(KEY) is None
    assert claim(store, owner="host:2:b").won  # free for the next worker
    assert not store.release(CallKey("s", "t", "unknown"), owner="host:1:a")


def test_releasing_a_take_over_restores_the_earlier_doubt(store: ResultStore) -> None:
    claim(store)
    assert store.mark_in_doubt(KEY, owner="host:1:a", expected_attempts=1)
    assert store.take_over(KEY, owner="host:2:b", lease_seconds=LEASE, expected_attempts=1).won

    assert store.release(KEY, owner="host:2:b")

    record = store.get(KEY)
    assert record is not None
    assert (record.state, record.attempts, record.result) == (CallState.IN_DOUBT, 1, None)
    assert not store.release(KEY, owner="host:2:b")  # nothing held any more


def test_a_claim_that_ran_to_a_result_cannot_be_released(store: ResultStore) -> None:
    claim(store)
    store.save_result(KEY, EVENT, owner=None)

    assert not store.release(KEY, owner="host:1:a")
    record = store.get(KEY)
    assert record is not None
    assert record.state is CallState.COMPLETED


def test_mark_many_applies_each_mark_by_the_same_rules_and_skips_unknown_calls(
    store: ResultStore,
) -> None:
    keys = [CallKey("sess_1", "turn_1", f"call_{n}") for n in range(4)]
    for key in keys:
        claim(store, key=key)
    for key in keys[:3]:
        store.save_result(key, {"type": "x", "call_id": key.call_id}, owner=None)
    store.mark(keys[2], CallState.APPLIED)
    unknown = CallKey("sess_1", "turn_1", "never_claimed")

    store.mark_many(
        [
            (keys[0], CallState.SUBMITTED),
            (unknown, CallState.APPLIED),
            (keys[1], CallState.APPLIED),
            (keys[2], CallState.SUBMITTED),  # backwards: ignored
            (keys[3], CallState.IN_DOUBT),
        ]
    )

    states = [store.get(key).state for key in keys]  # type: ignore[union-attr]
    assert states == [
        CallState.SUBMITTED,
        CallState.APPLIED,
        CallState.APPLIED,
        CallState.IN_DOUBT,
    ]
    assert store.get(unknown) is None
    store.mark_many([])


def test_get_many_reads_what_get_reads_for_each_key_and_leaves_out_unknown_ones(
    store: ResultStore,
) -> None:
    """A restart looks up thousands of calls at once (issue 26): ``get_many`` gives for
    each key the record ``get`` gives, across more keys than one statement reads, and
    leaves out the keys the store never saw (asked twice or not at all)."""
    from openagentcore.store._sql import GET_MANY_CHUNK

    keys = [CallKey(f"sess_{n % 7}", "turn_1", f"call_{n}") for n in range(GET_MANY_CHUNK + 3)]
    for key in keys:
        claim(store, key=key)
    for key in keys[::2]:
        store.save_result(key, {"type": "x", "call_id": key.call_id}, owner=None)
    unknown = [CallKey("sess_1", "turn_1", "never_claimed"), CallKey("sess_9", "t", "c")]
    # A key that matches a claimed one in two of its three parts is not that call.
    near = CallKey(keys[1].session_id, "turn_2", keys[1].call_id)

    found = store.get_many([unknown[0], *reversed(keys), near, keys[0], unknown[1]])

    assert found == {key: store.get(key) for key in keys}
    assert store.get_many([]) == {}
    assert store.get_many(unknown) == {}


# -- leases, staleness, take-over -------------------------------------------------------


def test_renew_lease_extends_only_the_current_owners_lease(
    store: ResultStore, clock: FakeClock
) -> None:
    claim(store, owner="host:1:a")
    clock.advance(LEASE + 1)  # renewing after expiry is fine while nobody took over

    assert store.renew_lease(KEY, owner="host:1:a", lease_seconds=60)
    assert not store.renew_lease(KEY, owner="host:2:b", lease_seconds=60)

    record = store.get(KEY)
    assert record is not None
    assert record.lease_expires_at == clock.now + 60
    assert not store.is_stale(record)


def test_renew_lease_fails_once_the_call_moved_on(store: ResultStore) -> None:
    assert not store.renew_lease(KEY, owner="host:1:a", lease_seconds=60)
    claim(store, owner="host:1:a")
    store.save_result(KEY, EVENT, owner="host:1:a")

    assert not store.renew_lease(KEY, owner="host:1:a", lease_seconds=60)


def test_staleness_follows_the_lease(store: ResultStore, clock: FakeClock) -> None:
    record = claim(store, owner=f"{process_host()}-elsewhere:1:a").record

    assert not store.is_stale(record)
    clock.advance(LEASE)
    assert store.is_stale(record)
    assert not store.is_stale(record, now=clock.now - 1)


def test_a_call_whose_owner_process_died_is_stale_before_its_lease_ends(
    store: ResultStore,
) -> None:
    record = claim(store, owner=dead_owner()).record

    assert store.is_stale(record)
    taken = store.take_over(KEY, owner="host:2:b", lease_seconds=LEASE, expected_attempts=1)
    assert taken.won


def test_a_call_with_a_result_is_never_stale(store: ResultStore, clock: FakeClock) -> None:
    claim(store)
    record = store.save_result(KEY, EVENT, owner=None)
    clock.advance(10 * LEASE)

    assert not store.is_stale(record)


def test_take_over_waits_for_the_lease_to_expire(store: ResultStore, clock: FakeClock) -> None:
    claim(store, owner="host:1:a")

    early = store.take_over(KEY, owner="host:2:b", lease_seconds=LEASE, expected_attempts=1)
    assert not early.won
    assert early.record.owner == "host:1:a"

    clock.advance(LEASE)
    late = store.take_over(KEY, owner="host:2:b", lease_seconds=10, expected_attempts=1)

    assert late.won
    assert late.record.state is CallState.STARTED
    assert (late.record.attempts, late.record.owner) == (2, "host:2:b")
    assert late.record.lease_expires_at == clock.now + 10
    assert store.get(KEY) == late.record
    assert not store.renew_lease(KEY, owner="host:1:a", lease_seconds=LEASE)


def test_take_over_is_a_compare_and_set_on_attempts(store: ResultStore, clock: FakeClock) -> None:
    claim(store)
    clock.advance(LEASE)

    wrong = store.take_over(KEY, owner="host:2:b", lease_seconds=LEASE, expected_attempts=2)
    assert not wrong.won
    assert wrong.record.attempts == 1

    outcomes = race(
        6,
        lambda i: store.take_over(
            KEY, owner=f"host:{i}:r", lease_seconds=LEASE, expected_attempts=1
        ),
    )

    winners = [outcome for outcome in outcomes if outcome.won]
    assert len(winners) == 1
    stored = store.get(KEY)
    assert stored is not None
    assert stored.attempts == 2
    assert stored.owner == winners[0].record.owner


def test_an_in_doubt_call_can_be_taken_over_at_once(store: ResultStore) -> None:
    claim(store, owner="host:1:a")
    store.mark(KEY, CallState.IN_DOUBT)

    taken = store.take_over(KEY, owner="host:2:b", lease_seconds=LEASE, expected_attempts=1)

    assert taken.won
    assert taken.record.state is CallState.STARTED


def test_an_owner_may_take_over_its_own_live_call(store: ResultStore) -> None:
    claim(store, owner="host:1:a")

    again = store.take_over(KEY, owner="host:1:a", lease_seconds=LEASE, expected_attempts=1)

    assert again.won
    assert again.record.attempts == 2


def test_a_call_with_a_result_cannot_be_taken_over(store: ResultStore, clock: FakeClock) -> None:
    claim(store)
    store.save_result(KEY, EVENT, owner=None)
    clock.advance(10 * LEASE)

    taken = store.take_over(KEY, owner="host:2:b", lease_seconds=LEASE, expected_attempts=1)

    assert not taken.won
    assert taken.record.state is CallState.COMPLETED


# -- find, prune, lifecycle -------------------------------------------------------------


def test_find_filters_by_session_and_state_oldest_first(
    store: ResultStore, clock: FakeClock
) -> None:
    for session, call in [("s_b", "c_1"), ("s_a", "c_2"), ("s_a", "c_3"), ("s_a", "c_4")]:
        claim(store, key=CallKey(session, "t", call))
        clock.advance(1)
    store.save_result(CallKey("s_a", "t", "c_3"), EVENT, owner=None)

    assert [r.key.call_id for r in store.find()] == ["c_1", "c_2", "c_3", "c_4"]
    assert [r.key.call_id for r in store.find(session_id="s_a")] == ["c_2", "c_3", "c_4"]
    assert [r.key.call_id for r in store.find(session_id="s_a", states=[CallState.STARTED])] == [
        "c_2",
        "c_4",
    ]
    assert [r.key.call_id for r in store.find(states={CallState.COMPLETED})] == ["c_3"]
    assert [r.key.call_id for r in store.find(limit=2)] == ["c_1", "c_2"]
    assert store.find(states=[]) == []
    assert store.find(session_id="nope") == []
    with pytest.raises(ValueError, match="limit"):
        store.find(limit=-1)


def test_prune_deletes_only_old_records_that_need_nothing_more(
    store: ResultStore, clock: FakeClock
) -> None:
    old_applied, old_abandoned, old_submitted, old_saved, old_running, new_applied = (
        CallKey("s", "t", name)
        for name in ("old_applied", "old_abandoned", "old_submitted", "saved", "running", "new")
    )
    for key in (old_applied, old_abandoned, old_submitted, old_saved, old_running):
        claim(store, key=key)
    for key in (old_applied, old_submitted, old_saved):
        store.save_result(key, EVENT, owner=None)
    store.mark(old_applied, CallState.APPLIED)
    store.mark(old_abandoned, CallState.ABANDONED)
    store.mark(old_submitted, CallState.SUBMITTED)  # accepted, never seen applied
    clock.advance(3600)
    claim(store, key=new_applied)
    store.save_result(new_applied, EVENT, owner=None)
    store.mark(new_applied, CallState.APPLIED)

    assert store.prune(older_than=1800) == 3

    # A saved result the server may not have yet, and a running call, are kept.
    assert {r.key for r in store.find()} == {old_saved, old_running, new_applied}
    assert store.prune(older_than=1800) == 0
    with pytest.raises(ValueError, match="older_than"):
        store.prune(older_than=-1)


def test_a_closed_store_says_so(spec: StoreSpec) -> None:
    store = spec.open()
    store.close()
    store.close()  # closing twice is harmless

    with pytest.raises(StoreClosedError, match="closed"):
        store.get(KEY)


def test_records_survive_reopening(durable_spec: StoreSpec, clock: FakeClock) -> None:
    with durable_spec.open(clock) as first:
        claim(first)
        saved = first.save_result(KEY, EVENT, owner="host:1:a")

    with durable_spec.open(clock) as second:
        assert second.get(KEY) == saved
        assert not claim(second, owner="host:2:b").won
