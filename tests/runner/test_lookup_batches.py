"""A round's lookups in one read of the store (issue 26): what the store thread does
with a ``LookupMany``, with the errors a real store gives."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterable
from pathlib import Path

from openagentcore.local import FunctionCall, LocalCore
from openagentcore.runner._effects import (
    Answers,
    Lookup,
    LookupMany,
    LookupResult,
    StoreAnswer,
    perform_store,
)
from openagentcore.store import (
    CallKey,
    CallRecord,
    CallState,
    MemoryResultStore,
    SQLiteResultStore,
    StoreCorruptError,
    StoreUnavailableError,
)

from ._support import PAIRED, Harness, applied_calls, one_turn

TOOL_RESULT = "agent.session.input.tool_result"

KEYS = [CallKey("sess", "turn", f"call_{n}") for n in range(4)]
OWNER = "host:1:gone"


def _lookups() -> LookupMany:
    return LookupMany(tuple(Lookup(key) for key in KEYS))


def _fill(store: SQLiteResultStore | MemoryResultStore) -> None:
    """call_0 saved, call_1 started by a dead owner with an expired lease, call_2
    started and live, call_3 never seen."""
    for key in KEYS[:3]:
        store.claim(key, function_name="f", arguments_hash="h", owner=OWNER, lease_seconds=60)
    store.save_result(KEYS[0], {"type": "x", "call_id": KEYS[0].call_id}, owner=None)


def _found(answer: StoreAnswer) -> list[LookupResult | Exception]:
    assert answer.error is None
    assert isinstance(answer.value, Answers)
    out: list[LookupResult | Exception] = []
    for lookup, each in zip(answer.effect.lookups, answer.value.answers, strict=True):  # type: ignore[union-attr]
        assert each.effect is lookup
        out.append(each.error if each.error is not None else each.value)  # type: ignore[arg-type]
    return out


def test_a_batch_of_lookups_answers_each_as_its_own_lookup_would(tmp_path: Path) -> None:
    clock = [1_700_000_000.0]
    store = SQLiteResultStore(tmp_path / "calls.db", clock=lambda: clock[0])
    _fill(store)
    store.take_over(KEYS[1], owner=OWNER, lease_seconds=0.001, expected_attempts=1)
    clock[0] += 1.0  # call_1's lease is over; call_2's is not

    batch = perform_store(_lookups(), store)
    alone = [perform_store(lookup, store).value for lookup in _lookups().lookups]

    assert _found(batch) == alone
    stale = [r.stale for r in alone if isinstance(r, LookupResult)]
    assert stale == [False, True, False, False]
    store.close()


def test_a_damaged_row_fails_only_its_own_lookup(tmp_path: Path) -> None:
    """``get_many`` fails as a whole on a damaged row, as ``get`` does on it; the batch
    then reads each key alone, so only that call gets the error."""
    path = tmp_path / "calls.db"
    store = SQLiteResultStore(path)
    _fill(store)
    with contextlib.closing(sqlite3.connect(path)) as raw, raw:
        raw.execute("UPDATE openagentcore_calls SET result = '{no' WHERE call_id = 'call_0'")

    found = _found(perform_store(_lookups(), store))

    assert isinstance(found[0], StoreCorruptError)
    records = [r.record for r in found[1:] if isinstance(r, LookupResult)]
    assert [r.key if r else None for r in records] == [KEYS[1], KEYS[2], None]
    store.close()


class _Down(MemoryResultStore):
    def get_many(self, keys: object) -> dict[CallKey, CallRecord]:
        raise StoreUnavailableError("down")


def test_an_unavailable_store_fails_the_batch_as_a_whole() -> None:
    store = _Down()
    _fill(store)

    answer = perform_store(_lookups(), store)

    assert isinstance(answer.error, StoreUnavailableError)
    assert answer.value is None


class _OnlyTheProtocolOfOld:
    """A store written before ``get_many``: the batch reads each key with ``get``."""

    def __init__(self) -> None:
        self.inner = MemoryResultStore()
        self.gets: list[CallKey] = []

    def get(self, key: CallKey) -> CallRecord | None:
        self.gets.append(key)
        return self.inner.get(key)

    def is_stale(self, record: CallRecord) -> bool:
        return self.inner.is_stale(record)


def test_a_store_without_get_many_is_read_key_by_key() -> None:
    old = _OnlyTheProtocolOfOld()
    _fill(old.inner)

    found = _found(perform_store(_lookups(), old))  # type: ignore[arg-type]

    assert old.gets == KEYS
    states = [r.record.state if r.record else None for r in found if isinstance(r, LookupResult)]
    assert states == [CallState.COMPLETED, CallState.STARTED, CallState.STARTED, None]


# -- through both drivers ----------------------------------------------------------------

RUNNER_COMBINATIONS = PAIRED


class _CountingReads(MemoryResultStore):
    """Counts the keys read one by one and in batches."""

    def __init__(self) -> None:
        super().__init__()
        self.single: list[CallKey] = []
        self.batches: list[int] = []

    def get(self, key: CallKey) -> CallRecord | None:
        self.single.append(key)
        return super().get(key)

    def get_many(self, keys: Iterable[CallKey]) -> dict[CallKey, CallRecord]:
        wanted = list(keys)
        self.batches.append(len(wanted))
        return super().get_many(wanted)


def test_a_restart_reads_its_saved_results_in_batches(
    make_core: Callable[..., LocalCore], make_harness: Callable[..., Harness]
) -> None:
    """Results saved before a crash and never posted: ``recover`` with one slot looks up
    the calls beyond it in one read, resubmits every saved result and runs nothing."""
    calls = [FunctionCall("add", {"a": n, "b": 1}) for n in range(12)]
    store = _CountingReads()
    harness = make_harness(make_core(scenario=one_turn(calls)), store=store, max_concurrency=1)
    runs: list[int] = []

    def add(a: int, b: int) -> int:
        """Add two integers."""
        runs.append(a)
        return a + b

    harness.runner.function(add)
    session_id = harness.create_session()
    for action in harness.wait_for_pending(session_id):
        key = CallKey(session_id, action.turn_id, action.call_id)
        store.claim(key, function_name="add", arguments_hash="h", owner=OWNER, lease_seconds=60)
        event = {"type": TOOL_RESULT, "turn_id": action.turn_id, "call_id": action.call_id}
        store.save_result(key, {**event, "success": True, "output": "saved"}, owner=OWNER)

    report = harness.recover(session_id)

    assert (report.calls_run, report.results_resubmitted, runs) == (0, 12, [])
    assert store.single == []
    assert sum(store.batches) == 11  # the twelfth call took the slot: claimed, not read
    assert max(store.batches) > 1
    outputs = [c.output.output for c in applied_calls(harness.client, session_id).values()]
    assert outputs == ["saved"] * 12
