"""Helpers for the runner tests: reading back what the server applied."""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, Literal

import httpx
from anyio.from_thread import start_blocking_portal

from openagentcore import AsyncClient, Client
from openagentcore.local import FunctionCall, LocalCore, Scenario, TurnScript
from openagentcore.runner import AsyncFunctionRunner, FunctionRunner, ServeReport, TurnResult
from openagentcore.runner._effects import ClaimCall, StoreAnswer
from openagentcore.store import CallRecord, CallState, Claim, MemoryResultStore
from openagentcore.types import FunctionCallAction, FunctionCallItem, FunctionCallOutputItem


@dataclass(frozen=True)
class AppliedCall:
    """One function call of a Session and the output Item the server applied for it."""

    call: FunctionCallItem
    output: FunctionCallOutputItem | None

    @property
    def arguments(self) -> Any:
        return self.call.decoded_arguments()


def applied_calls(client: Client, session_id: str) -> dict[str, AppliedCall]:
    """Every ``function_call`` Item of the Session by call ID, with its output Item."""
    items = list(client.sessions.items.list(session_id, order="asc"))
    outputs = {item.call_id: item for item in items if isinstance(item, FunctionCallOutputItem)}
    duplicated = [
        call_id
        for call_id in outputs
        if sum(isinstance(i, FunctionCallOutputItem) and i.call_id == call_id for i in items) > 1
    ]
    assert not duplicated, f"calls with more than one output Item: {duplicated}"
    return {
        item.call_id: AppliedCall(item, outputs.get(item.call_id))
        for item in items
        if isinstance(item, FunctionCallItem)
    }


def one_turn(*steps: Sequence[FunctionCall], answer: str = "{summary}") -> Scenario:
    """A scenario whose first Turn runs ``steps`` (each a round of parallel calls)."""
    return Scenario(turns=[TurnScript(steps=[tuple(step) for step in steps], answer=answer)])


RunnerKind = Literal["sync", "async"]


class Harness:
    """One runner, sync or async, driven from the test's thread.

    The async runner lives on an event loop in a blocking portal, so one test body
    covers both. Every response the runner's client receives is recorded, to prove that
    a fault really happened.
    """

    def __init__(
        self,
        core: LocalCore,
        kind: RunnerKind,
        *,
        api_key: str | None = None,
        slow_results: float = 0.0,
        **options: Any,
    ) -> None:
        self.core = core
        #: Seconds the runner's client waits after each answer to a result POST, as if
        #: the server were slow: the runner's loop is stuck in the request meanwhile.
        self.slow_results = slow_results
        #: The key the runner uses; the test's own client always has the right one.
        self.runner_api_key = api_key or core.api_key
        self.kind = kind
        self.responses: list[tuple[str, str, int]] = []
        self.client = Client(api_key=core.api_key, base_url=core.base_url)
        self.runner: FunctionRunner | AsyncFunctionRunner
        self._stack = ExitStack()
        self._stack.callback(self.client.close)
        options.setdefault("store", MemoryResultStore())
        if kind == "sync":
            http = httpx.Client(event_hooks={"response": [self._record]})
            self._stack.callback(http.close)
            runner_client = Client(
                api_key=self.runner_api_key, base_url=core.base_url, http_client=http
            )
            self._stack.callback(runner_client.close)
            self.runner = FunctionRunner(runner_client, **options)
            self._stack.callback(self.runner.close)
        else:
            self.portal = self._stack.enter_context(start_blocking_portal())
            self.runner = self.portal.call(functools.partial(self._async_runner, **options))

    async def _async_runner(self, **options: Any) -> AsyncFunctionRunner:
        async def record(response: httpx.Response) -> None:
            self._record(response, sleep=False)
            if self._is_result_post(response):
                await asyncio.sleep(self.slow_results)

        http = httpx.AsyncClient(event_hooks={"response": [record]})
        runner_client = AsyncClient(
            api_key=self.runner_api_key, base_url=self.core.base_url, http_client=http
        )
        runner = AsyncFunctionRunner(runner_client, **options)

        async def close() -> None:
            await runner.close()
            await runner_client.close()
            await http.aclose()

        self._stack.callback(self.portal.call, close)
        return runner

    def _record(self, response: httpx.Response, *, sleep: bool = True) -> None:
        request = response.request
        self.responses.append((request.method, request.url.path, response.status_code))
        if sleep and self._is_result_post(response):
            time.sleep(self.slow_results)

    def _is_result_post(self, response: httpx.Response) -> bool:
        request = response.request
        return (
            self.slow_results > 0
            and request.method == "POST"
            and request.url.path.endswith("/events")
            and b"tool_result" in request.content
        )

    def statuses(self, method: str, suffix: str) -> list[int]:
        return [s for m, path, s in self.responses if m == method and path.endswith(suffix)]

    def create_session(self, input: str = "go", **agent: Any) -> str:
        """A Session on the runner's tools; creating it starts the first Turn."""
        spec = {"model": "scripted", "tools": self.runner.tools, **agent}
        return self.client.sessions.create(agent=spec, input=input).id

    def wait_for_pending(self, session_id: str, timeout: float = 5) -> list[FunctionCallAction]:
        """The Session's pending function calls, once it has some (before any runner
        serves it)."""
        deadline = time.monotonic() + timeout
        while not (pending := self.client.sessions.retrieve(session_id).pending_function_calls):
            assert time.monotonic() < deadline, f"Session {session_id} asked for no calls"
            time.sleep(0.01)
        return pending

    def serve(
        self, session_id: str, timeout: float = 15, until: Literal["idle", "forever"] = "idle"
    ) -> ServeReport:
        if isinstance(self.runner, FunctionRunner):
            return self.runner.serve(session_id, timeout=timeout, until=until)
        serve = functools.partial(self.runner.serve, session_id, timeout=timeout, until=until)
        return self.portal.call(serve)

    def recover(self, session_id: str) -> ServeReport:
        if isinstance(self.runner, FunctionRunner):
            return self.runner.recover(session_id)
        return self.portal.call(self.runner.recover, session_id)

    def run_turn(self, session_id: str, text: str, **options: Any) -> TurnResult:
        options.setdefault("timeout", 15)
        if isinstance(self.runner, FunctionRunner):
            return self.runner.run_turn(session_id, text, **options)
        return self.portal.call(
            functools.partial(self.runner.run_turn, session_id, text, **options)
        )

    def close(self) -> None:
        self._stack.close()


Flavour = Literal["def", "async def"]

#: Every runner with every kind of function. A module may set ``RUNNER_COMBINATIONS``
#: to a shorter list when what it tests does not depend on the driver.
ALL_COMBINATIONS: list[tuple[RunnerKind, Flavour]] = [
    ("sync", "def"),
    ("sync", "async def"),
    ("async", "def"),
    ("async", "async def"),
]
PAIRED: list[tuple[RunnerKind, Flavour]] = [("sync", "def"), ("async", "async def")]


def flavoured(func: Callable[..., Any], flavour: Flavour) -> Callable[..., Any]:
    """``func`` itself, or a coroutine function with the same name, docs and signature."""
    if flavour == "def":
        return func

    @functools.wraps(func)
    async def coroutine(*args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0)
        return func(*args, **kwargs)

    return coroutine


class CallLog:
    """Thread-safe record of function runs, and of how many ran at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.runs: list[tuple[str, Any]] = []
        self.running = 0
        self.peak = 0

    def enter(self, name: str, argument: Any) -> None:
        with self._lock:
            self.runs.append((name, argument))
            self.running += 1
            self.peak = max(self.peak, self.running)

    def leave(self) -> None:
        with self._lock:
            self.running -= 1


def won_claim(effect: ClaimCall, now: float) -> StoreAnswer:
    """The store's answer to ``effect`` when the claim wins: attempt 1 of a fresh record,
    its lease counted from ``now`` (for tests that drive the core message by message)."""
    record = CallRecord(
        key=effect.key,
        function_name=effect.function_name,
        arguments_hash=effect.arguments_hash,
        state=CallState.STARTED,
        result=None,
        idempotency_key="oac-test",
        attempts=1,
        owner=effect.owner,
        lease_expires_at=now + effect.lease_seconds,
        created_at=now,
        updated_at=now,
    )
    return StoreAnswer(effect, Claim(won=True, record=record))
