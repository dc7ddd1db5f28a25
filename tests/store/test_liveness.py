"""The store rules ask an injected liveness check about an owner, never the process
table or the set of this process's open runners: a store decides staleness from what
its ``liveness`` says (``True`` running, ``False`` gone, ``None`` unknown) and the lease."""

from __future__ import annotations

import dataclasses

import pytest

from openagentcore.store import (
    CallKey,
    CallRecord,
    CallState,
    Liveness,
    MemoryResultStore,
    new_owner_id,
    process_liveness,
)
from openagentcore.store._rules import is_stale, started_record

KEY = CallKey("sess_live", "turn_live", "call_live")
NOW = 1_000.0


def _started(lease_seconds: float) -> CallRecord:
    return started_record(
        KEY,
        function_name="charge",
        arguments_hash="h",
        owner="elsewhere:1:token",
        lease_seconds=lease_seconds,
        now=NOW - 1,
    )


@pytest.mark.parametrize(
    ("known", "lease_left", "stale"),
    [
        (True, True, False),
        (None, True, False),
        (False, True, True),  # known gone: stale however long its lease
        (True, False, False),  # known running: trusted whatever its lease says
        (None, False, True),
        (False, False, True),
    ],
)
def test_the_rule_asks_the_injected_check(
    known: bool | None, lease_left: bool, stale: bool
) -> None:
    asked: list[str] = []

    def liveness(owner: str) -> bool | None:
        asked.append(owner)
        return known

    record = _started(lease_seconds=60.0 if lease_left else 0.5)
    assert is_stale(record, now=NOW, liveness=liveness) is stale
    assert asked == ["elsewhere:1:token"]


def test_a_record_without_an_owner_needs_no_check() -> None:
    def never(owner: str) -> bool | None:
        raise AssertionError("asked about an owner the record does not have")

    lapsed = dataclasses.replace(_started(0.5), owner=None)
    held = dataclasses.replace(_started(60.0), owner=None)
    assert is_stale(lapsed, now=NOW, liveness=never)
    assert not is_stale(held, now=NOW, liveness=never)


class _Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def _store(liveness: Liveness) -> tuple[MemoryResultStore, _Clock]:
    clock = _Clock()
    return MemoryResultStore(clock=clock, liveness=liveness), clock


def test_a_store_trusts_an_owner_its_check_says_is_running() -> None:
    store, clock = _store(lambda owner: True if owner == "a" else None)
    store.claim(KEY, function_name="charge", arguments_hash="h", owner="a", lease_seconds=1.0)
    clock.now += 10  # the lease has long lapsed

    lost = store.claim(KEY, function_name="charge", arguments_hash="h", owner="b", lease_seconds=1)
    assert not lost.won
    assert not lost.stale
    assert not store.mark_in_doubt(KEY, owner="b", expected_attempts=1)
    assert not store.take_over(KEY, owner="b", lease_seconds=1.0, expected_attempts=1).won


def test_a_store_gives_up_on_an_owner_its_check_says_is_gone() -> None:
    store, _ = _store(lambda owner: False if owner == "a" else None)
    store.claim(KEY, function_name="charge", arguments_hash="h", owner="a", lease_seconds=60)

    lost = store.claim(KEY, function_name="charge", arguments_hash="h", owner="b", lease_seconds=1)
    assert not lost.won
    assert lost.stale  # the lease has 60 s left
    assert store.mark_in_doubt(KEY, owner="b", expected_attempts=1)
    record = store.get(KEY)
    assert record is not None
    assert record.state is CallState.IN_DOUBT


def test_by_default_a_store_asks_this_host() -> None:
    """The default keeps the old behaviour: an owner id of this very process with no
    open runner is not known to be running, so a lapsed lease makes its claim stale."""
    owner = new_owner_id()
    assert process_liveness(owner) is None
    store, clock = _store(process_liveness)
    store.claim(KEY, function_name="charge", arguments_hash="h", owner=owner, lease_seconds=1.0)
    clock.now += 10
    record = store.get(KEY)
    assert record is not None
    assert store.is_stale(record)
