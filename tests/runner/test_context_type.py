"""CallContext: the call's identity and limits, current_call() in the threads and tasks
a runner uses, and the downstream idempotency key."""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import given
from hypothesis import strategies as st

import openagentcore
from openagentcore import CallContext, current_call
from openagentcore.runner._context import (
    call_idempotency_key,
    cancel_call,
    new_call_context,
    run_with_context,
    run_with_context_async,
)


def make(call_id: str = "call_1", timeout: float | None = None) -> CallContext:
    return new_call_context("sess_1", "turn_1", call_id, "pay", timeout=timeout)


def test_the_context_carries_the_calls_identity() -> None:
    context = new_call_context("sess_1", "turn_1", "call_1", "pay", attempt=2)
    assert (context.session_id, context.turn_id, context.call_id) == ("sess_1", "turn_1", "call_1")
    assert (context.function_name, context.attempt) == ("pay", 2)
    assert context.idempotency_key == call_idempotency_key("sess_1", "turn_1", "call_1")
    assert context.deadline is None
    assert context.time_remaining() is None
    assert not context.cancelled.is_set()
    with pytest.raises(dataclasses.FrozenInstanceError):
        context.attempt = 3  # type: ignore[misc]


def test_attempts_count_from_one() -> None:
    with pytest.raises(ValueError, match="attempt counts from 1"):
        new_call_context("s", "t", "c", "f", attempt=0)


def test_the_deadline_is_on_the_monotonic_clock() -> None:
    before = time.monotonic()
    context = make(timeout=30.0)
    assert context.deadline is not None
    assert before + 30.0 <= context.deadline <= time.monotonic() + 30.0
    remaining = context.time_remaining()
    assert remaining is not None
    assert 0 < remaining <= 30.0
    expired = dataclasses.replace(context, deadline=time.monotonic() - 1)
    assert expired.time_remaining() == 0.0


def test_cancellation_is_a_read_only_flag_the_runner_sets() -> None:
    context = make()
    assert not hasattr(context.cancelled, "set")
    assert context.cancelled.wait(0) is False
    waiter_saw: list[bool] = []
    waiter = threading.Thread(target=lambda: waiter_saw.append(context.cancelled.wait(30)))
    waiter.start()
    cancel_call(context)
    waiter.join(30)
    assert waiter_saw == [True]
    assert context.cancelled.is_set()
    assert "is_set=True" in repr(context.cancelled)


def test_the_idempotency_key_is_stable_and_distinct_per_call() -> None:
    key = call_idempotency_key("sess_1", "turn_1", "call_1")
    # Fixed: a restarted worker, another host or a later release must derive the same.
    assert key == call_idempotency_key("sess_1", "turn_1", "call_1")
    assert key.startswith("oac-call-")
    assert len(key) == len("oac-call-") + 64
    assert call_idempotency_key("sess_1", "turn_1", "call_2") != key
    # Length prefixes keep IDs from running into each other.
    assert call_idempotency_key("ab", "c", "d") != call_idempotency_key("a", "bc", "d")


def test_the_idempotency_key_differs_from_the_result_submission_key() -> None:
    from openagentcore.store import CallKey
    from openagentcore.store._records import idempotency_key_for

    key = CallKey("sess_1", "turn_1", "call_1")
    assert call_idempotency_key("sess_1", "turn_1", "call_1") != idempotency_key_for(key)


@given(st.text(), st.text(), st.text())
def test_the_idempotency_key_fits_128_ascii_bytes_for_any_ids(
    session_id: str, turn_id: str, call_id: str
) -> None:
    key = call_idempotency_key(session_id, turn_id, call_id)
    assert len(key.encode("ascii")) <= 128
    assert key == call_idempotency_key(session_id, turn_id, call_id)


def test_current_call_outside_a_call_says_what_to_do() -> None:
    with pytest.raises(RuntimeError, match="outside a function call run by a FunctionRunner"):
        current_call()


def test_current_call_in_the_worker_thread_and_in_threads_it_starts() -> None:
    seen: dict[str, CallContext] = {}

    def deep() -> None:
        seen["nested"] = current_call()

    def function() -> str:
        seen["worker"] = current_call()
        thread = threading.Thread(target=contextvars.copy_context().run, args=(deep,))
        thread.start()
        thread.join()
        return "done"

    context = make()
    with ThreadPoolExecutor(max_workers=1) as pool:
        assert pool.submit(run_with_context, context, function).result() == "done"
        # The worker thread is reused: the next task there sees no call.
        assert pool.submit(_has_call).result() is False
    assert seen == {"worker": context, "nested": context}
    assert not _has_call()


def test_concurrent_calls_in_threads_each_see_their_own_context() -> None:
    barrier = threading.Barrier(4)

    def function() -> str:
        barrier.wait(30)  # all four run at once
        return current_call().call_id

    contexts = [make(f"call_{index}") for index in range(4)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = [pool.submit(run_with_context, context, function) for context in contexts]
        assert [future.result() for future in futures] == [c.call_id for c in contexts]


def test_run_with_context_passes_arguments_and_exceptions() -> None:
    def add(a: int, *, b: int) -> int:
        return a + b

    assert run_with_context(make(), add, 1, b=2) == 3
    with pytest.raises(ZeroDivisionError):
        run_with_context(make(), lambda: 1 / 0)
    assert not _has_call()


def test_current_call_in_tasks_and_to_thread() -> None:
    async def main() -> None:
        async def child() -> str:
            await asyncio.sleep(0)
            return current_call().call_id

        async def function(tag: str) -> tuple[str, str, str]:
            in_task = await asyncio.create_task(child())
            in_thread = await asyncio.to_thread(lambda: current_call().call_id)
            return current_call().call_id, in_task, in_thread

        first, second = make("call_a"), make("call_b")
        results = await asyncio.gather(
            asyncio.create_task(run_with_context_async(first, function, "a")),
            asyncio.create_task(run_with_context_async(second, function, "b")),
        )
        assert list(results) == [("call_a",) * 3, ("call_b",) * 3]
        # Awaited directly, the previous value comes back afterwards.
        assert await run_with_context_async(first, function, "a") == ("call_a",) * 3
        assert not _has_call()

    asyncio.run(main())


def test_call_context_and_current_call_are_public() -> None:
    assert openagentcore.CallContext is CallContext
    assert openagentcore.current_call is current_call
    assert {"CallContext", "current_call"} <= set(openagentcore.__all__)


def _has_call() -> bool:
    try:
        current_call()
    except RuntimeError:
        return False
    return True
