"""The clock steps forward while a call runs (an NTP step, a VM resumed from a pause):
every lease on the host looks expired until its owner renews it. Another runner on the
same host must not take a call that a live process is running for gone (it did: it
marked the call in doubt and posted "outcome unknown" for a call that then completed).
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

from openagentcore import (
    AsyncClient,
    AsyncFunctionRunner,
    Client,
    FunctionRunner,
    SQLiteResultStore,
)
from openagentcore.local import FunctionCall, LocalCore
from openagentcore.runner import ServeReport
from openagentcore.store import owner_is_alive

from ._support import applied_calls, one_turn

#: How far the second runner's clock is ahead: past any lease the first one holds.
STEP_SECONDS = 600.0


def test_a_clock_step_does_not_make_a_live_owners_call_look_abandoned(tmp_path: Path) -> None:
    core = LocalCore(scenario=one_turn([FunctionCall("charge", {"order": "o1"})])).start()
    path = tmp_path / "calls.db"
    started, release = threading.Event(), threading.Event()
    runs: list[str] = []
    reports: dict[str, ServeReport] = {}
    try:
        client = Client(base_url=core.base_url, api_key=core.api_key)
        session_id = client.sessions.create(agent={"model": "scripted"}, input="go").id
        first = FunctionRunner(client, store=SQLiteResultStore(path), lease_seconds=5)

        @first.function(name="charge")
        def charge(order: str) -> str:
            """Charge an order (not idempotent)."""
            runs.append(order)
            started.set()
            release.wait(20)
            return f"charged {order}"

        stepped = SQLiteResultStore(path, clock=lambda: time.time() + STEP_SECONDS)
        second = FunctionRunner(client, store=stepped, lease_seconds=5)
        second.function(name="charge", description="Charge an order (not idempotent).")(
            lambda order: runs.append(order) or f"charged {order} again"
        )

        def serve(name: str, runner: FunctionRunner) -> None:
            reports[name] = runner.serve(session_id, timeout=30)

        serving_first = threading.Thread(target=serve, args=("first", first))
        serving_first.start()
        assert started.wait(10)
        serving_second = threading.Thread(target=serve, args=("second", second))
        serving_second.start()
        time.sleep(1.0)  # the second runner has read the Session and seen the claim
        release.set()
        serving_first.join(40)
        serving_second.join(40)
        first.close()
        second.close()

        assert runs == ["o1"]
        (applied,) = applied_calls(client, session_id).values()
        assert applied.output is not None
        assert applied.output.status == "completed", applied.output
        assert reports["second"].in_doubt == []
        client.close()
    finally:
        release.set()
        core.stop()


def test_a_runner_vouches_for_its_claims_until_it_is_closed(tmp_path: Path) -> None:
    """Once closed, nothing renews a runner's leases: its claims are left to them."""
    core = LocalCore().start()
    try:
        client = Client(base_url=core.base_url, api_key=core.api_key)
        sync_runner = FunctionRunner(client, store=SQLiteResultStore(tmp_path / "a.db"))
        async_client = AsyncClient(base_url=core.base_url, api_key=core.api_key)
        async_runner = AsyncFunctionRunner(async_client, store=SQLiteResultStore(tmp_path / "b.db"))
        owners = [sync_runner._core.owner, async_runner._core.owner]
        assert all(owner_is_alive(owner) for owner in owners)

        sync_runner.close()
        asyncio.run(async_runner.close())

        assert not any(owner_is_alive(owner) for owner in owners)
        client.close()
        asyncio.run(async_client.close())
    finally:
        core.stop()
