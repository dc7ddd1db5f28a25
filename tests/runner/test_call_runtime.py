"""What a function sees of its call at run time, and the per-function limits, on both
runners over real loopback HTTP: CallContext fields, current_call() in the threads a
function starts, the same idempotency key after a restart, timeouts, cancellation of a
cancelled Turn and ``max_concurrency`` per function."""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from openagentcore import CallContext, current_call
from openagentcore.local import FunctionCall, LocalCore
from openagentcore.runner._context import call_idempotency_key
from openagentcore.runner._results import CANCELLED_ERROR, timeout_error
from openagentcore.store import SQLiteResultStore
from openagentcore.types import InputCancelEvent

from ._support import CallLog, Flavour, Harness, RunnerKind, applied_calls, one_turn

MakeCore = Callable[..., LocalCore]
MakeHarness = Callable[..., Harness]


def _failed_output(harness: Harness, session_id: str) -> str:
    (applied,) = applied_calls(harness.client, session_id).values()
    assert applied.output is not None
    assert applied.output.status == "failed"
    return str(applied.output.error)


# -- the context -------------------------------------------------------------------------


def test_the_function_gets_the_identity_and_deadline_of_its_call(
    make_core: MakeCore, make_harness: MakeHarness, flavour: Flavour
) -> None:
    step = [FunctionCall("plain", {"n": 1}), FunctionCall("limited", {"n": 2})]
    harness = make_harness(make_core(scenario=one_turn(step)))
    seen: dict[str, tuple[CallContext, CallContext]] = {}

    def record(name: str, ctx: CallContext) -> str:
        seen[name] = (ctx, current_call())
        return name

    if flavour == "def":

        @harness.runner.function
        def plain(n: int, ctx: CallContext) -> str:
            """No limit."""
            return record("plain", ctx)

        @harness.runner.function(timeout=30)
        def limited(n: int, call: CallContext) -> str:
            """Thirty seconds at most."""
            return record("limited", call)

    else:

        @harness.runner.function
        async def plain(n: int, ctx: CallContext) -> str:
            """No limit."""
            return record("plain", ctx)

        @harness.runner.function(timeout=30)
        async def limited(n: int, call: CallContext) -> str:
            """Thirty seconds at most."""
            return record("limited", call)

    session_id = harness.create_session()
    started = time.monotonic()
    harness.serve(session_id)

    calls = applied_calls(harness.client, session_id)
    by_name = {applied.call.name: call_id for call_id, applied in calls.items()}
    (turn,) = harness.client.sessions.turns.list(session_id).data
    for name in ("plain", "limited"):
        ctx, current = seen[name]
        assert current is ctx
        assert (ctx.session_id, ctx.turn_id, ctx.call_id) == (session_id, turn.id, by_name[name])
        assert (ctx.function_name, ctx.attempt) == (name, 1)
        assert ctx.idempotency_key == call_idempotency_key(session_id, turn.id, by_name[name])
        assert len(ctx.idempotency_key.encode()) <= 128
        assert not ctx.cancelled.is_set()
    assert seen["plain"][0].deadline is None
    deadline = seen["limited"][0].deadline
    assert deadline is not None
    assert started + 30 <= deadline <= time.monotonic() + 30
    assert seen["plain"][0].idempotency_key != seen["limited"][0].idempotency_key
    with pytest.raises(RuntimeError, match="outside a function call"):
        current_call()


def test_current_call_works_in_threads_the_function_starts(
    make_core: MakeCore, make_harness: MakeHarness, flavour: Flavour
) -> None:
    harness = make_harness(make_core(scenario=one_turn([FunctionCall("lookup", {})])))
    seen: dict[str, str] = {}

    def deep(where: str) -> None:
        seen[where] = current_call().call_id

    if flavour == "def":

        @harness.runner.function
        def lookup() -> str:
            """Look something up in a helper thread."""
            deep("function")
            thread = threading.Thread(target=contextvars.copy_context().run, args=(deep, "thread"))
            thread.start()
            thread.join(10)
            return "ok"

    else:

        @harness.runner.function
        async def lookup() -> str:
            """Look something up in a helper thread."""
            deep("function")
            await asyncio.to_thread(deep, "thread")
            await asyncio.create_task(asyncio.to_thread(deep, "task"))
            return "ok"

    session_id = harness.create_session()
    harness.serve(session_id)

    (call_id,) = applied_calls(harness.client, session_id)
    assert set(seen.values()) == {call_id}
    assert len(seen) == (2 if flavour == "def" else 3)


_WORKER = """
import json, os, signal, sys, time
from pathlib import Path
from openagentcore import CallContext, Client, FunctionRunner, SQLiteResultStore
from openagentcore.store import CallKey

base_url, api_key, session_id, store, seen = sys.argv[1:]
with Client(base_url=base_url, api_key=api_key) as client:
    runner = FunctionRunner(client, store=SQLiteResultStore(store))

    @runner.function(idempotent=True)
    def book(room: str, ctx: CallContext) -> str:
        '''Book a room.'''
        Path(seen).write_text(json.dumps([ctx.attempt, ctx.idempotency_key]))
        # An idempotent function starts as its claim is sent: die once it is durable.
        reader = SQLiteResultStore(store)
        while reader.get(CallKey(ctx.session_id, ctx.turn_id, ctx.call_id)) is None:
            time.sleep(0.005)
        os.kill(os.getpid(), signal.SIGKILL)
        return "unreachable"

    runner.serve(session_id, timeout=30)
"""


def test_a_restart_reruns_an_idempotent_call_with_the_same_key(
    make_core: MakeCore, runner_kind: RunnerKind, tmp_path: Path
) -> None:
    """A worker is killed inside an idempotent function once its claim is durable; a new
    runner on the same store runs it again as attempt 2 with the idempotency key attempt
    1 saw."""
    core = make_core(scenario=one_turn([FunctionCall("book", {"room": "r1"})]))
    store, first_seen = tmp_path / "calls.db", tmp_path / "first.json"
    attempts: list[CallContext] = []
    harness = Harness(core, runner_kind, store=SQLiteResultStore(store))
    try:

        @harness.runner.function(idempotent=True)
        def book(room: str, ctx: CallContext) -> str:
            """Book a room."""
            attempts.append(ctx)
            return f"booked {room}"

        session_id = harness.create_session()
        harness.wait_for_pending(session_id)
        args = [core.base_url, core.api_key, session_id, str(store), str(first_seen)]
        worker = subprocess.run(
            [sys.executable, "-c", _WORKER, *args], capture_output=True, text=True, timeout=60
        )
        assert worker.returncode == -signal.SIGKILL, worker.stderr
        first_attempt, first_key = json.loads(first_seen.read_text())

        report = harness.serve(session_id)
        (applied,) = applied_calls(harness.client, session_id).values()
    finally:
        harness.close()

    assert report.in_doubt
    assert report.final_status == "idle"
    (ctx,) = attempts
    assert (first_attempt, ctx.attempt) == (1, 2)
    assert ctx.idempotency_key == first_key
    assert applied.output is not None
    assert applied.output.output == "booked r1"


# -- timeouts ----------------------------------------------------------------------------


@pytest.mark.parametrize("idempotent", [False, True])
def test_an_async_function_past_its_timeout_is_cancelled(
    make_core: MakeCore, make_harness: MakeHarness, idempotent: bool
) -> None:
    harness = make_harness(make_core(scenario=one_turn([FunctionCall("fetch", {})])))
    cancelled = threading.Event()

    @harness.runner.function(timeout=0.3, idempotent=idempotent)
    async def fetch() -> str:
        """Fetch something that never arrives."""
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "arrived"

    session_id = harness.create_session()
    report = harness.serve(session_id, timeout=30)

    assert report.final_status == "idle"
    assert cancelled.wait(10)
    output = _failed_output(harness, session_id)
    assert output == timeout_error(0.3, idempotent=idempotent)
    assert "timed out after 0.3 s" in output
    assert ("outcome is unknown" in output) is not idempotent


def test_a_sync_function_that_ignores_its_timeout_does_not_hold_up_the_turn(
    make_core: MakeCore,
    make_harness: MakeHarness,
    caplog: pytest.LogCaptureFixture,
) -> None:
    harness = make_harness(make_core(scenario=one_turn([FunctionCall("export", {})])))
    release = threading.Event()
    saw_cancelled: list[bool] = []

    @harness.runner.function(timeout=0.3)
    def export(ctx: CallContext) -> str:
        """Export a report; never looks at ctx.cancelled."""
        release.wait(30)
        saw_cancelled.append(ctx.cancelled.is_set())
        return "exported late"

    session_id = harness.create_session()
    with caplog.at_level(logging.WARNING, logger="openagentcore.runner"):
        report = harness.serve(session_id, timeout=30)
        assert report.final_status == "idle"
        assert _failed_output(harness, session_id) == timeout_error(0.3, idempotent=False)

        release.set()
        deadline = time.monotonic() + 10
        while not any("late outcome was not sent" in r.getMessage() for r in caplog.records):
            assert time.monotonic() < deadline, "the late outcome was never logged"
            time.sleep(0.02)

    assert saw_cancelled == [True]
    assert _failed_output(harness, session_id) == timeout_error(0.3, idempotent=False)
    (late,) = [r for r in caplog.records if "late outcome" in r.getMessage()]
    assert "exported late" in late.getMessage()


def test_a_sync_function_that_polls_cancelled_returns_early(
    make_core: MakeCore, make_harness: MakeHarness
) -> None:
    harness = make_harness(make_core(scenario=one_turn([FunctionCall("crunch", {})])))
    steps: list[int] = []
    stopped = threading.Event()

    @harness.runner.function(timeout=0.3, idempotent=True)
    def crunch(ctx: CallContext) -> str:
        """Crunch numbers in small steps, stopping when asked."""
        while not ctx.cancelled.wait(0.01):
            steps.append(1)
            assert len(steps) < 3000, "the cancellation flag was never set"
        stopped.set()
        return "stopped early"

    session_id = harness.create_session()
    report = harness.serve(session_id, timeout=30)

    assert report.final_status == "idle"
    assert stopped.wait(10)
    assert _failed_output(harness, session_id) == timeout_error(0.3, idempotent=True)


# -- concurrency -------------------------------------------------------------------------


def test_max_concurrency_per_function_holds_while_others_run_in_parallel(
    make_core: MakeCore, make_harness: MakeHarness, flavour: Flavour
) -> None:
    step = [FunctionCall("single", {"n": n}) for n in range(4)]
    step += [FunctionCall("free", {"n": n}) for n in range(3)]
    harness = make_harness(make_core(scenario=one_turn(step)), max_concurrency=8)
    single_log, free_log = CallLog(), CallLog()
    together = threading.Barrier(3)

    def single(n: int) -> int:
        """At most one at a time (a rate-limited API, say)."""
        single_log.enter("single", n)
        time.sleep(0.05)  # room for an overlap, were the limit not kept
        single_log.leave()
        return n

    def free(n: int) -> int:
        """No limit: all three must run at once to pass the barrier."""
        free_log.enter("free", n)
        together.wait(20)
        free_log.leave()
        return n

    if flavour == "def":
        harness.runner.function(max_concurrency=1)(single)
        harness.runner.function(free)
    else:

        async def single_async(n: int) -> int:
            """At most one at a time."""
            single_log.enter("single", n)
            await asyncio.sleep(0.05)
            single_log.leave()
            return n

        async def free_async(n: int) -> int:
            """No limit."""
            free_log.enter("free", n)
            await asyncio.to_thread(together.wait, 20)
            free_log.leave()
            return n

        harness.runner.function(name="single", max_concurrency=1)(single_async)
        harness.runner.function(name="free")(free_async)

    session_id = harness.create_session()
    report = harness.serve(session_id, timeout=30)

    assert report.final_status == "idle"
    assert len(single_log.runs) == 4
    assert single_log.peak == 1
    assert len(free_log.runs) == 3
    assert free_log.peak == 3
    outputs = [a.output for a in applied_calls(harness.client, session_id).values()]
    assert all(o is not None and o.status == "completed" for o in outputs)


# -- cancellation of a Turn --------------------------------------------------------------


def test_functions_of_a_cancelled_turn_are_cancelled(
    make_core: MakeCore, make_harness: MakeHarness, flavour: Flavour
) -> None:
    harness = make_harness(make_core(scenario=one_turn([FunctionCall("ship", {"order": "o1"})])))
    session: dict[str, str] = {}
    stopped: list[str] = []
    done = threading.Event()

    def cancel_turn() -> None:
        harness.client.sessions.events.create(session["id"], events=[InputCancelEvent()])

    if flavour == "def":

        @harness.runner.function
        def ship(order: str, ctx: CallContext) -> str:
            """Ship an order; the user cancels the Turn while it runs."""
            cancel_turn()
            try:
                if ctx.cancelled.wait(20):
                    stopped.append("saw cancelled")
                    return "stopped before shipping"
                return f"shipped {order}"
            finally:
                done.set()

    else:

        @harness.runner.function
        async def ship(order: str) -> str:
            """Ship an order; the user cancels the Turn while it runs."""
            try:
                # The cancellation may land while the cancel request is still in flight.
                await asyncio.to_thread(cancel_turn)
                await asyncio.sleep(20)
            except asyncio.CancelledError:
                stopped.append("cancelled")
                raise
            finally:
                done.set()
            return f"shipped {order}"

    session["id"] = harness.create_session()
    report = harness.serve(session["id"], timeout=30)
    # The Session is idle once the Turn is cancelled; the function may stop a moment later.
    assert done.wait(15)

    assert stopped == (["saw cancelled"] if flavour == "def" else ["cancelled"])
    (turn,) = harness.client.sessions.turns.list(session["id"]).data
    assert turn.status == "cancelled"
    (key,) = report.abandoned
    deadline = time.monotonic() + 10
    while (record := harness.runner.store.get(key)) is None or record.result is None:
        assert time.monotonic() < deadline, f"no result recorded for the cancelled call: {record}"
        time.sleep(0.02)
    if flavour == "async def":
        assert record.result["error"] == CANCELLED_ERROR
    (applied,) = applied_calls(harness.client, session["id"]).values()
    assert applied.output is None


def test_max_concurrency_counts_a_timed_out_function_still_running(
    make_core: MakeCore, make_harness: MakeHarness
) -> None:
    step = [FunctionCall("single", {"n": 0}), FunctionCall("single", {"n": 1})]
    harness = make_harness(make_core(scenario=one_turn(step)))
    log = CallLog()

    @harness.runner.function(max_concurrency=1, timeout=0.3)
    def single(n: int) -> int:
        """At most one at a time; call 0 overruns its timeout and ignores cancellation."""
        log.enter("single", n)
        if n == 0:
            threading.Event().wait(5)
        log.leave()
        return n

    session_id = harness.create_session()
    harness.serve(session_id, timeout=30)
    deadline = time.monotonic() + 10
    while log.running or len(log.runs) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.02)

    assert log.peak == 1
