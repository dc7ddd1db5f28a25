"""Limits, timeouts and cancellation under load, end to end over loopback HTTP: the
defects found by attacking per-function ``max_concurrency``, ``timeout`` and Turn
cancellation on both runners."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

from openagentcore import CallContext
from openagentcore.local import FunctionCall, LocalCore
from openagentcore.runner._results import timeout_error
from openagentcore.types import InputCancelEvent

from ._support import Flavour, Harness, applied_calls, one_turn

MakeCore = Callable[..., LocalCore]
MakeHarness = Callable[..., Harness]


def test_queued_calls_of_a_cancelled_turn_never_start(
    make_core: MakeCore, make_harness: MakeHarness, flavour: Flavour
) -> None:
    """A Turn asks for three calls of a ``max_concurrency=1`` function. While the first
    runs, the user cancels the Turn; the runner sees it (the running call's
    ``ctx.cancelled`` is set, or its coroutine is cancelled). The two calls still queued
    for the slot belong to a Turn the runner knows is over, yet each is started as soon
    as the slot frees: functions run, with their effects, for a Turn the user cancelled
    (and their results are then refused and recorded as abandoned)."""
    step = [FunctionCall("ship", {"n": n}) for n in range(3)]
    harness = make_harness(make_core(scenario=one_turn(step)), max_concurrency=8)
    session: dict[str, str] = {}
    ran: list[int] = []
    saw_cancel = threading.Event()

    def cancel_turn() -> None:
        harness.client.sessions.events.create(session["id"], events=[InputCancelEvent()])

    if flavour == "def":

        @harness.runner.function(max_concurrency=1)
        def ship(n: int, ctx: CallContext) -> str:
            """Ship an order; one at a time. The first call cancels the Turn."""
            ran.append(n)
            if len(ran) == 1:
                cancel_turn()
                if ctx.cancelled.wait(20):
                    saw_cancel.set()
                    return "stopped"
            return f"shipped {n}"

    else:

        @harness.runner.function(max_concurrency=1)
        async def ship(n: int) -> str:
            """Ship an order; one at a time. The first call cancels the Turn."""
            ran.append(n)
            if len(ran) == 1:
                try:
                    # The cancellation may land while the cancel request is in flight.
                    await asyncio.to_thread(cancel_turn)
                    await asyncio.sleep(20)
                except asyncio.CancelledError:
                    saw_cancel.set()
                    raise
            return f"shipped {n}"

    session["id"] = harness.create_session()
    report = harness.serve(session["id"], timeout=30)

    assert saw_cancel.is_set(), "the runner never saw the Turn's cancellation"
    (turn,) = harness.client.sessions.turns.list(session["id"]).data
    assert turn.status == "cancelled"
    assert report.final_status == "idle"
    assert len(ran) == 1, f"calls of the cancelled Turn started after it ended: {ran}"


def test_a_coroutine_that_blocks_the_loop_past_its_timeout_gets_the_timeout_failure(
    make_core: MakeCore,
) -> None:
    """Async runner: a coroutine function with ``timeout=0.1`` blocks the event loop
    (``time.sleep`` inside ``async def``) for 0.6 s, so the pump cannot time it out while
    it runs. When it returns, the round feeds its outcome to the core before looking at
    deadlines (``run_round`` feeds messages, then ``take_effects`` runs ``_time_out``),
    and ``on_function_done`` never compares the deadline: a function that outlived its
    timeout six times over has its success saved and sent, instead of the timeout
    failure (with the success kept as its late outcome)."""
    harness = Harness(make_core(scenario=one_turn([FunctionCall("blocker", {})])), "async")
    try:

        @harness.runner.function(timeout=0.1)
        async def blocker() -> str:
            """Blocks its event loop well past its timeout."""
            time.sleep(0.6)  # noqa: ASYNC251 - the point of the test
            return "finished late"

        session_id = harness.create_session()
        report = harness.serve(session_id, timeout=20)
        (applied,) = applied_calls(harness.client, session_id).values()
    finally:
        harness.close()

    assert report.final_status == "idle"
    assert applied.output is not None
    assert (applied.output.status, applied.output.error) == (
        "failed",
        timeout_error(0.1, idempotent=False),
    ), f"sent {applied.output.status}: {applied.output.output!r}"
