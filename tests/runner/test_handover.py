"""Calls another worker started: in doubt when it is gone, never run twice when it is not."""

from __future__ import annotations

import functools
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from openagentcore.local import FunctionCall, LocalCore
from openagentcore.runner import IN_DOUBT_ERROR, InDoubtCall, InDoubtDecision, ServeReport
from openagentcore.store import CallKey, CallState, SQLiteResultStore, arguments_hash, new_owner_id

from ._support import PAIRED, CallLog, Flavour, Harness, applied_calls, flavoured, one_turn

MakeCore = Callable[..., LocalCore]
MakeHarness = Callable[..., Harness]

# The in-doubt decisions are the core's; two combinations cover both drivers.
RUNNER_COMBINATIONS = PAIRED


@functools.cache
def dead_owner() -> str:
    """The owner id a process on this host had; the process has exited."""
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            "from openagentcore.store import new_owner_id; print(new_owner_id())",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return child.stdout.strip()


#: An owner on another host with an expired lease: only the lease says it is gone.
def expired_remote_owner() -> str:
    return "another-host:4242:feedface0000"


def start_session_claimed_by(harness: Harness, owner: str, lease_seconds: float) -> CallKey:
    """Create a Session whose one call another owner claimed and never finished."""
    session_id = harness.create_session()
    (action,) = harness.wait_for_pending(session_id)
    key = CallKey(session_id, action.turn_id, action.call_id)
    claim = harness.runner.store.claim(
        key,
        function_name=action.name,
        arguments_hash=arguments_hash(action.arguments),
        owner=owner,
        lease_seconds=lease_seconds,
    )
    assert claim.won
    return key


@pytest.mark.parametrize(
    ("owner", "lease_seconds", "decision", "success", "text", "runs"),
    [
        (dead_owner, 60.0, None, False, IN_DOUBT_ERROR, 0),
        (expired_remote_owner, 0.001, None, False, IN_DOUBT_ERROR, 0),
        (
            dead_owner,
            60.0,
            InDoubtDecision.fail("Checked: no charge."),
            False,
            "Checked: no charge.",
            0,
        ),
        (dead_owner, 60.0, InDoubtDecision.result({"charged": True}), True, '{"charged": true}', 0),
        (expired_remote_owner, 0.001, InDoubtDecision.rerun(), True, "charged o1", 1),
    ],
    ids=["dead-process", "expired-lease", "policy-fail", "policy-result", "policy-rerun"],
)
def test_a_call_left_by_a_gone_worker_is_settled_by_the_in_doubt_policy(
    make_core: MakeCore,
    make_harness: MakeHarness,
    flavour: Flavour,
    owner: Callable[[], str],
    lease_seconds: float,
    decision: InDoubtDecision | None,
    success: bool,
    text: str,
    runs: int,
) -> None:
    asked: list[InDoubtCall] = []

    def policy(call: InDoubtCall) -> InDoubtDecision:
        asked.append(call)
        assert decision is not None
        return decision

    harness = make_harness(
        make_core(scenario=one_turn([FunctionCall("charge", {"order": "o1"})])),
        on_in_doubt=None if decision is None else policy,
    )
    log = CallLog()

    def charge(order: str) -> str:
        """Charge an order."""
        log.enter("charge", order)
        log.leave()
        return f"charged {order}"

    harness.runner.function(flavoured(charge, flavour))
    key = start_session_claimed_by(harness, owner(), lease_seconds)

    report = harness.serve(key.session_id)

    assert report.in_doubt == [key]
    assert len(log.runs) == runs
    if decision is not None:
        (call,) = asked
        assert (call.key, call.function_name, call.attempts) == (key, "charge", 1)
        assert call.arguments == {"order": "o1"}
    applied = applied_calls(harness.client, key.session_id)[key.call_id]
    assert applied.output is not None
    assert applied.output.status == ("completed" if success else "failed")
    assert (applied.output.output if success else applied.output.error) == text


def test_a_live_workers_claim_is_never_taken_over(
    make_core: MakeCore, make_harness: MakeHarness
) -> None:
    harness = make_harness(make_core(scenario=one_turn([FunctionCall("charge", {"order": "o1"})])))
    log = CallLog()

    def charge(order: str) -> str:
        """Charge an order."""
        log.enter("charge", order)
        log.leave()
        return f"charged {order}"

    harness.runner.function(charge)
    # This process is alive and its lease is long: the call is someone else's.
    key = start_session_claimed_by(harness, new_owner_id(), 60.0)

    report = harness.recover(key.session_id)

    assert log.runs == []
    assert report.in_doubt == []
    record = harness.runner.store.get(key)
    assert record is not None
    assert record.state is CallState.STARTED
    assert harness.client.sessions.retrieve(key.session_id).status == "requires_action"


def test_two_runners_sharing_a_store_run_each_call_once(
    make_core: MakeCore, tmp_path: Path
) -> None:
    steps = [
        [FunctionCall("add", {"a": step, "b": slot}) for slot in range(4)] for step in range(3)
    ]
    core = make_core(scenario=one_turn(*steps))
    database = tmp_path / "calls.db"
    log = CallLog()

    def add(a: int, b: int) -> int:
        """Add two integers."""
        log.enter("add", (a, b))
        log.leave()
        return a + b

    harnesses = [
        Harness(core, "sync", store=SQLiteResultStore(database)),
        Harness(core, "async", store=SQLiteResultStore(database)),
    ]
    try:
        for harness in harnesses:
            harness.runner.function(add)
        session_id = harnesses[0].create_session()
        errors: list[BaseException] = []

        def serve(harness: Harness) -> None:
            try:
                harness.serve(session_id)
            except BaseException as error:
                errors.append(error)

        threads = [threading.Thread(target=serve, args=(h,)) for h in harnesses]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert errors == []
        calls = applied_calls(harnesses[0].client, session_id)
        assert len(calls) == 12
        assert sorted(pair for _, pair in log.runs) == sorted(
            (c.arguments["a"], c.arguments["b"]) for c in calls.values()
        )
        assert all(c.output is not None for c in calls.values())
    finally:
        for harness in harnesses:
            harness.close()


def test_a_call_running_longer_than_its_lease_keeps_it_by_renewal(
    make_core: MakeCore, tmp_path: Path
) -> None:
    core = make_core(scenario=one_turn([FunctionCall("slow", {"order": "o1"})]))
    database = tmp_path / "calls.db"
    log = CallLog()
    running = threading.Event()

    def slow(order: str) -> str:
        """Run for several leases."""
        log.enter("slow", order)
        running.set()
        time.sleep(2.5)
        log.leave()
        return f"done {order}"

    lease: dict[str, Any] = {"lease_seconds": 1.0, "poll_interval": 0.05}
    holder = Harness(core, "sync", store=SQLiteResultStore(database), **lease)
    watcher = Harness(core, "async", store=SQLiteResultStore(database), **lease)
    try:
        holder.runner.function(slow)
        watcher.runner.function(slow)
        session_id = holder.create_session()
        reports: dict[str, ServeReport] = {}
        serving = threading.Thread(
            target=lambda: reports.setdefault("holder", holder.serve(session_id))
        )
        serving.start()
        assert running.wait(timeout=5)
        # The watcher sees the call pending for the whole run, past several leases.
        reports["watcher"] = watcher.serve(session_id)
        serving.join(timeout=10)
        applied = list(applied_calls(holder.client, session_id).values())
    finally:
        holder.close()
        watcher.close()
    assert log.runs == [("slow", "o1")]
    assert reports["holder"].in_doubt == reports["watcher"].in_doubt == []
    assert reports["holder"].calls_run == 1
    assert reports["watcher"].calls_run == 0
    ((output),) = [a.output for a in applied]
    assert output is not None
    assert output.output == "done o1"


def test_a_lease_is_renewed_while_the_loop_waits_on_a_slow_submission(
    make_core: MakeCore, make_harness: MakeHarness
) -> None:
    """Leases are renewed apart from the loop: a quick call's slow result POST must not
    let the lease of a call still running lapse."""
    calls = [FunctionCall("quick", {"order": "q1"}), FunctionCall("slow", {"order": "s1"})]
    lease_seconds = 1.0
    harness = make_harness(
        make_core(scenario=one_turn(calls)), slow_results=3.0, lease_seconds=lease_seconds
    )
    store = harness.runner.store
    lapsed: list[CallKey] = []
    done = threading.Event()

    @harness.runner.function
    def quick(order: str) -> str:
        """Return at once."""
        return order

    @harness.runner.function
    def slow(order: str) -> str:
        """Run for several leases."""
        time.sleep(2.5)
        return order

    def watch() -> None:
        while not done.wait(0.02):
            for record in store.find(states=[CallState.STARTED]):
                if store.is_stale(record):
                    lapsed.append(record.key)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        session_id = harness.create_session()
        report = harness.serve(session_id)
    finally:
        done.set()
        watcher.join()

    assert lapsed == []
    assert report.calls_run == 2
    assert report.in_doubt == []
