"""The async runner's lanes: hooks that block never delay the store's work (issue 23:
sixteen slow on_in_doubt hooks let a running call's lease lapse, because hooks ran on
the threads that make claims, saves and lease renewals)."""

from __future__ import annotations

import asyncio
import threading

from openagentcore import AsyncClient
from openagentcore.runner import AsyncFunctionRunner, InDoubtDecision
from openagentcore.runner._effects import AskInDoubt, ReportAction
from openagentcore.runner._runtime import HOOK_THREADS, STORE_THREADS, Lane
from openagentcore.store import CallKey, MemoryResultStore


def test_store_work_runs_while_every_hook_thread_blocks() -> None:
    release = threading.Event()

    async def main() -> None:
        client = AsyncClient(api_key="sk-test", base_url="http://127.0.0.1:9/v1")
        runner = AsyncFunctionRunner(client, store=MemoryResultStore())
        try:
            blocked = [
                runner._rt.offload(Lane.HOOKS, release.wait) for _ in range(STORE_THREADS + 1)
            ]
            # More hooks than the store has threads, all blocking: the store's lane is
            # still free at once.
            done = await asyncio.wait_for(runner._rt.offload(Lane.STORE, lambda: "saved"), 30)
            assert done == "saved"
            assert not any(future.done() for future in blocked)
        finally:
            release.set()
            await runner.close()
            await client.close()

    asyncio.run(main())


def test_the_application_hooks_run_on_the_hooks_lane() -> None:
    key = CallKey("sess", "turn", "call")
    lanes: list[Lane] = []

    async def main() -> None:
        client = AsyncClient(api_key="sk-test", base_url="http://127.0.0.1:9/v1")
        runner = AsyncFunctionRunner(
            client,
            store=MemoryResultStore(),
            on_in_doubt=lambda call: InDoubtDecision.fail(),
            on_action=lambda session_id, action: None,
        )
        offload = runner._rt.offload

        def spy(lane: Lane, work: object) -> object:
            lanes.append(lane)
            return offload(lane, work)  # type: ignore[arg-type]

        runner._rt.offload = spy  # type: ignore[method-assign]
        try:
            runner._inbox = runner._rt.inbox()  # what the hooks answer goes there
            runner._ask_in_doubt(AskInDoubt(key, "charge", "{}", 1))
            runner._report_action(ReportAction("sess", object()))  # type: ignore[arg-type]
            await asyncio.sleep(0)
        finally:
            await runner.close()
            await client.close()

    asyncio.run(main())
    assert lanes == [Lane.HOOKS, Lane.HOOKS]
    assert HOOK_THREADS >= 1
