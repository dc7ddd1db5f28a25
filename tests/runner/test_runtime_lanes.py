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


def test_a_round_with_more_store_calls_than_threads_hands_them_over_in_batches() -> None:
    """A restart's thousands of lookups in one round go to the store's threads in
    batches (each hand-off costs about as much CPU as a lookup), lease renewals alone,
    every call once and in order; a round that fits the threads sends each alone."""
    from openagentcore.runner._driver import STORE_BATCH, store_batches
    from openagentcore.runner._effects import Lookup, RenewLeases
    from openagentcore.runner._runtime import STORE_THREADS
    from openagentcore.store import CallKey

    lookups = [Lookup(CallKey("sess", "turn", f"call_{n}")) for n in range(1000)]
    renewal = RenewLeases(keys=(lookups[0].key,), owner="me", lease_seconds=10.0)
    few = lookups[:STORE_THREADS]

    assert store_batches(list(few)) == [[effect] for effect in few]
    batches = store_batches([*lookups[:500], renewal, *lookups[500:]])
    assert batches[0] == [renewal]
    assert [effect for batch in batches[1:] for effect in batch] == lookups
    assert max(len(batch) for batch in batches) == STORE_BATCH
