"""A function that finishes after its timeout, on both runners over real loopback HTTP:
the model keeps the timeout failure, and the late outcome is kept in the result store
for the operator (issue 12)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from openagentcore import CallContext
from openagentcore.local import FunctionCall, LocalCore
from openagentcore.runner._results import ENDED_WITHOUT_RESULT, INTERNAL_ERROR, timeout_error
from openagentcore.store import (
    CallKey,
    CallRecord,
    CallState,
    MemoryResultStore,
    ResultStore,
    SQLiteResultStore,
    StoreUnavailableError,
)

from ._support import Flavour, Harness, applied_calls, one_turn

MakeCore = Callable[..., LocalCore]
MakeHarness = Callable[..., Harness]
TIMED_OUT = timeout_error(0.3, idempotent=False)


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ResultStore]:
    opened: ResultStore
    if request.param == "memory":
        opened = MemoryResultStore()
    else:
        opened = SQLiteResultStore(tmp_path / "calls.db")
    yield opened
    opened.close()


def _register_overrunning(
    harness: Harness, flavour: Flavour, release: threading.Event, finish: Callable[[], str]
) -> None:
    """``export`` runs past its 0.3 s timeout until ``release`` is set, then ends with
    ``finish()``: a plain function ignores ``ctx.cancelled``; a coroutine catches its
    cancellation and carries on."""
    if flavour == "def":

        @harness.runner.function(timeout=0.3)
        def export(ctx: CallContext) -> str:
            """Export a report; never looks at ctx.cancelled."""
            release.wait(30)
            return finish()

    else:

        @harness.runner.function(timeout=0.3)
        async def export() -> str:
            """Export a report; swallows its cancellation."""
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                await asyncio.to_thread(release.wait, 30)
            return finish()


def _timed_out_record(
    harness: Harness, store: ResultStore, session_id: str
) -> tuple[CallRecord, str]:
    """Serve the Session to its end; the model got the timeout failure."""
    report = harness.serve(session_id, timeout=30)
    assert report.final_status == "idle"
    (applied,) = applied_calls(harness.client, session_id).values()
    assert applied.output is not None
    assert (applied.output.status, applied.output.error) == ("failed", TIMED_OUT)
    (record,) = store.find(session_id=session_id)
    assert record.result is not None
    assert record.result["error"] == TIMED_OUT
    assert record.late_outcome is None
    return record, applied.output.id


def _wait_for_late_outcome(store: ResultStore, before: CallRecord) -> CallRecord:
    deadline = time.monotonic() + 10
    while (record := store.get(before.key)) is None or record.late_outcome is None:
        assert time.monotonic() < deadline, f"the late outcome was never kept: {record}"
        time.sleep(0.02)
    return record


def _assert_nothing_sent_changed(
    harness: Harness, session_id: str, before: CallRecord, after: CallRecord, output_id: str
) -> None:
    assert after.result == before.result
    assert (after.idempotency_key, after.attempts) == (before.idempotency_key, before.attempts)
    assert after.state in (CallState.SUBMITTED, CallState.APPLIED)
    assert after.late_at is not None
    assert after.late_at >= before.created_at
    (applied,) = applied_calls(harness.client, session_id).values()
    assert applied.output is not None
    assert (applied.output.id, applied.output.error) == (output_id, TIMED_OUT)


def _finish_late(
    harness: Harness, store: ResultStore, flavour: Flavour, finish: Callable[[], str]
) -> tuple[CallRecord, dict[str, Any]]:
    """Let ``export`` time out, then finish with ``finish()``; check that nothing sent
    changed, and return the record as it was before and the late outcome kept."""
    release = threading.Event()
    _register_overrunning(harness, flavour, release, finish)
    session_id = harness.create_session()
    before, output_id = _timed_out_record(harness, store, session_id)

    release.set()
    after = _wait_for_late_outcome(store, before)

    _assert_nothing_sent_changed(harness, session_id, before, after, output_id)
    assert after.late_outcome is not None
    return before, after.late_outcome


def _event(record: CallRecord, **fields: object) -> dict[str, object]:
    key = record.key
    tool_result = "agent.session.input.tool_result"
    return {"type": tool_result, "turn_id": key.turn_id, "call_id": key.call_id, **fields}


def test_a_late_result_is_kept_for_the_operator_and_the_sent_failure_stays(
    make_core: MakeCore, make_harness: MakeHarness, flavour: Flavour, store: ResultStore
) -> None:
    harness = make_harness(make_core(scenario=one_turn([FunctionCall("export", {})])), store=store)

    before, late = _finish_late(harness, store, flavour, lambda: "exported late")

    assert late == _event(before, success=True, output="exported late")


def test_a_late_failure_is_kept_too(
    make_core: MakeCore, make_harness: MakeHarness, flavour: Flavour
) -> None:
    store = MemoryResultStore()
    harness = make_harness(make_core(scenario=one_turn([FunctionCall("export", {})])), store=store)

    def fail() -> str:
        raise RuntimeError("the export server went away")

    before, late = _finish_late(harness, store, flavour, fail)

    assert late == _event(before, success=False, error=INTERNAL_ERROR)


def test_a_function_that_exits_after_its_timeout_leaves_a_note_of_it(
    make_core: MakeCore,
) -> None:
    """Sync runner only: on the async runner a ``SystemExit`` from a function ends the
    event loop, as asyncio does for any task."""
    store = MemoryResultStore()
    harness = Harness(
        make_core(scenario=one_turn([FunctionCall("export", {})])), "sync", store=store
    )

    def exit_worker() -> str:
        raise SystemExit("the function ended its worker")

    try:
        before, late = _finish_late(harness, store, "def", exit_worker)
    finally:
        harness.close()

    assert late == _event(before, success=False, error=ENDED_WITHOUT_RESULT)


class _NoLateOutcomes(MemoryResultStore):
    """A store that is down whenever a late outcome is written, and fine otherwise."""

    def __init__(self) -> None:
        super().__init__()
        self.attempts = 0

    def keep_late_outcome(self, key: CallKey, outcome: Any) -> CallRecord:
        self.attempts += 1
        raise StoreUnavailableError("test outage while keeping a late outcome")


def test_a_late_outcome_the_store_cannot_keep_is_logged_once_and_blocks_nothing(
    make_core: MakeCore,
    make_harness: MakeHarness,
    flavour: Flavour,
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = _NoLateOutcomes()
    scenario = one_turn([FunctionCall("export", {})])
    harness = make_harness(make_core(scenario=scenario), store=store)
    release = threading.Event()
    _register_overrunning(harness, flavour, release, lambda: "exported late")
    first = harness.create_session()
    before, _ = _timed_out_record(harness, store, first)

    with caplog.at_level(logging.WARNING, logger="openagentcore.runner"):
        release.set()
        deadline = time.monotonic() + 10
        while not any("Could not keep" in r.getMessage() for r in caplog.records):
            assert time.monotonic() < deadline, "the failed write was never logged"
            time.sleep(0.02)
        # The late outcome itself is in the log, whatever the store did.
        assert any("exported late" in r.getMessage() for r in caplog.records)

    # The runner goes on: the next Session's call times out and is answered as before.
    release.clear()
    second = harness.create_session()
    _timed_out_record(harness, store, second)
    release.set()
    deadline = time.monotonic() + 10
    while store.attempts < 2:
        assert time.monotonic() < deadline, "the second late outcome was never written"
        time.sleep(0.02)
    time.sleep(0.5)  # several store retry delays
    assert store.attempts == 2, "each late outcome is written once, never retried"
    after = store.get(before.key)
    assert after is not None
    assert (after.result, after.late_outcome) == (before.result, None)
