"""``stop(force=True)``: running functions are cancelled, and a function that stops
because of it is recorded as cancelled, not in doubt (issue 12, Cancellation)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

from openagentcore.local import FunctionCall, LocalCore
from openagentcore.runner import CallContext, ServeReport
from openagentcore.runner._results import CANCELLED_ERROR

from ._support import Flavour, Harness, one_turn

MakeCore = Callable[..., LocalCore]
MakeHarness = Callable[..., Harness]


def test_a_forced_stop_cancels_running_functions(
    make_core: MakeCore, make_harness: MakeHarness, flavour: Flavour
) -> None:
    harness = make_harness(make_core(scenario=one_turn([FunctionCall("wait", {"n": 1})])))
    started = threading.Event()

    if flavour == "def":

        def wait(n: int, ctx: CallContext) -> str:
            """Wait until cancelled."""
            started.set()
            if ctx.cancelled.wait(30):
                raise asyncio.CancelledError  # stopped before any effect
            return "waited"

        harness.runner.function(wait)
    else:

        async def wait_async(n: int) -> str:
            """Wait until cancelled."""
            started.set()
            await asyncio.sleep(30)
            return "waited"

        harness.runner.function(name="wait")(wait_async)

    session_id = harness.create_session()
    reports: list[ServeReport] = []
    server = threading.Thread(
        target=lambda: reports.append(harness.serve(session_id, timeout=30, until="forever"))
    )
    server.start()
    assert started.wait(10)
    stopped_at = time.monotonic()
    harness.runner.stop(force=True)
    server.join(timeout=15)

    assert not server.is_alive()
    assert time.monotonic() - stopped_at < 10
    (record,) = harness.runner.store.find(session_id=session_id)
    assert record.result is not None
    assert record.result["error"] == CANCELLED_ERROR
    (report,) = reports
    assert report.in_doubt == []
