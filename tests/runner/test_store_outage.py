"""The result store going away for a while (a database restart, a locked SQLite file).

The runner must ride it out: no call runs twice, no result is posted before it is
saved, no call is put in doubt by the outage alone, and serving resumes on its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import pytest

from openagentcore.local import FunctionCall, LocalCore
from openagentcore.store import (
    CallKey,
    CallRecord,
    CallState,
    Claim,
    MemoryResultStore,
    StoreUnavailableError,
)

from ._support import PAIRED, CallLog, Flavour, Harness, applied_calls, flavoured, one_turn

MakeCore = Callable[..., LocalCore]
MakeHarness = Callable[..., Harness]

# The outage handling is the core's; one combination per driver covers it.
RUNNER_COMBINATIONS = PAIRED
T = TypeVar("T")

ROUNDS = [
    [FunctionCall("add", {"a": 1, "b": 2}), FunctionCall("add", {"a": 3, "b": 4})],
    [FunctionCall("add", {"a": 5, "b": 6})],
]


class OutageStore(MemoryResultStore):
    """A memory store whose chosen operations fail while it is "down".

    ``landed`` operations fail *after* taking effect, as when a connection breaks during
    the commit: the caller cannot tell whether the write happened.
    """

    def __init__(self) -> None:
        super().__init__()
        self.down_for: set[str] = set()
        self.landed: set[str] = set()
        self.failures: dict[str, int] = {}
        self._outage_lock = threading.Lock()

    def fail(self, *operations: str, landed: Iterable[str] = ()) -> None:
        with self._outage_lock:
            self.down_for = set(operations)
            self.landed = set(landed)

    def recover(self) -> None:
        with self._outage_lock:
            self.down_for = set()
            self.landed = set()

    def recover_after(self, seconds: float) -> None:
        timer = threading.Timer(seconds, self.recover)
        timer.daemon = True
        timer.start()

    def _check(self, operation: str, *, before: bool) -> None:
        with self._outage_lock:
            failing = operation in self.down_for and (operation in self.landed) != before
            if failing:
                self.failures[operation] = self.failures.get(operation, 0) + 1
        if failing:
            raise StoreUnavailableError(f"test outage during {operation}")

    def _call(self, operation: str, do: Callable[[], T]) -> T:
        self._check(operation, before=True)
        result = do()
        self._check(operation, before=False)
        return result

    def claim(self, key: CallKey, **kwargs: Any) -> Claim:
        return self._call("claim", lambda: super(OutageStore, self).claim(key, **kwargs))

    def get(self, key: CallKey) -> CallRecord | None:
        return self._call("get", lambda: super(OutageStore, self).get(key))

    def get_many(self, keys: Iterable[CallKey]) -> dict[CallKey, CallRecord]:
        # A batch of lookups reads as "get" does: it fails the same way in an outage.
        return self._call("get", lambda: super(OutageStore, self).get_many(keys))

    def save_result(
        self, key: CallKey, result: Mapping[str, Any], *, owner: str | None
    ) -> CallRecord:
        return self._call(
            "save_result",
            lambda: super(OutageStore, self).save_result(key, result, owner=owner),
        )

    def mark(self, key: CallKey, state: CallState) -> None:
        self._call("mark", lambda: super(OutageStore, self).mark(key, state))

    def renew_lease(self, key: CallKey, *, owner: str, lease_seconds: float) -> bool:
        return self._call(
            "renew_lease",
            lambda: super(OutageStore, self).renew_lease(
                key, owner=owner, lease_seconds=lease_seconds
            ),
        )


def serve_with(
    make_core: MakeCore,
    make_harness: MakeHarness,
    flavour: Flavour,
    store: OutageStore,
    **options: Any,
) -> tuple[Harness, str, CallLog]:
    harness = make_harness(make_core(scenario=one_turn(*ROUNDS)), store=store, **options)
    log = CallLog()

    def add(a: int, b: int) -> int:
        """Add two integers."""
        log.enter("add", (a, b))
        log.leave()
        return a + b

    harness.runner.function(flavoured(add, flavour))
    return harness, harness.create_session(), log


def assert_each_call_ran_once_and_applied(harness: Harness, session_id: str, log: CallLog) -> None:
    calls = applied_calls(harness.client, session_id)
    assert len(calls) == 3
    assert sorted(log.runs) == sorted(
        ("add", (c.arguments["a"], c.arguments["b"])) for c in calls.values()
    )
    for applied in calls.values():
        assert applied.output is not None
        assert applied.output.output == str(applied.arguments["a"] + applied.arguments["b"])
    assert harness.client.sessions.retrieve(session_id).status == "idle"


@pytest.mark.parametrize(
    ("operations", "landed"),
    [
        pytest.param({"save_result"}, set(), id="saving-fails"),
        pytest.param({"save_result"}, {"save_result"}, id="saving-lands-but-reports-failure"),
        pytest.param({"claim", "get"}, set(), id="deciding-fails"),
        pytest.param({"claim"}, {"claim"}, id="claim-lands-but-reports-failure"),
        pytest.param({"mark"}, set(), id="progress-marks-fail"),
        pytest.param(
            {"claim", "get", "save_result", "mark", "renew_lease"}, set(), id="everything-fails"
        ),
    ],
)
def test_an_outage_is_ridden_out_without_repeats_or_doubt(
    make_core: MakeCore,
    make_harness: MakeHarness,
    flavour: Flavour,
    operations: set[str],
    landed: set[str],
) -> None:
    store = OutageStore()
    store.fail(*operations, landed=landed)
    harness, session_id, log = serve_with(make_core, make_harness, flavour, store)
    store.recover_after(0.5)  # counted from here: only the runner uses the store

    report = harness.serve(session_id)

    assert store.failures, "the outage never hit the runner"
    assert_each_call_ran_once_and_applied(harness, session_id, log)
    assert report.final_status == "idle"
    assert report.in_doubt == []
    assert report.store_errors >= 1


def test_a_result_is_never_posted_while_it_cannot_be_saved(
    make_core: MakeCore, make_harness: MakeHarness, flavour: Flavour
) -> None:
    store = OutageStore()
    store.fail("save_result")
    # A short grace: the saves keep failing, so the timed-out serve and close() would
    # each wait out the whole default grace for nothing.
    harness, session_id, log = serve_with(
        make_core, make_harness, flavour, store, shutdown_grace=0.5
    )

    with pytest.raises(TimeoutError):
        harness.serve(session_id, timeout=1.5)

    assert len(log.runs) == 2, "the first round should have run"
    assert harness.statuses("POST", "/events") == [], "posted a result that was never saved"
    pending = harness.client.sessions.retrieve(session_id).pending_function_calls
    assert len(pending) == 2
    # Still claimed by this runner, so no other worker takes them over as in doubt.
    for action in pending:
        record = store.get(CallKey(session_id, action.turn_id, action.call_id))
        assert record is not None
        assert record.state is CallState.STARTED


def test_a_claim_is_kept_alive_while_its_result_waits_for_the_store(
    make_core: MakeCore, make_harness: MakeHarness, flavour: Flavour
) -> None:
    store = OutageStore()
    store.fail("save_result")
    harness, session_id, log = serve_with(
        make_core, make_harness, flavour, store, lease_seconds=0.6
    )
    store.recover_after(1.5)

    report = harness.serve(session_id)

    assert_each_call_ran_once_and_applied(harness, session_id, log)
    assert report.in_doubt == []
    for call in applied_calls(harness.client, session_id).values():
        record = store.get(CallKey(session_id, call.call.turn_id or "", call.call.call_id))
        assert record is not None
        assert record.attempts == 1


def test_recover_saves_and_submits_once_the_store_is_back(
    make_core: MakeCore, make_harness: MakeHarness, flavour: Flavour
) -> None:
    store = OutageStore()
    store.fail("save_result")
    harness, session_id, log = serve_with(make_core, make_harness, flavour, store)
    harness.wait_for_pending(session_id)
    store.recover_after(0.3)  # the functions finish at once, well inside the outage

    report = harness.recover(session_id)

    assert report.calls_run == report.results_submitted == 2
    assert report.store_errors >= 1
    assert len(log.runs) == 2
