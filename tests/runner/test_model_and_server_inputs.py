"""The runner's input boundary: what the model and the server send.

Each test pins one defect an adversarial review of that boundary found: it runs real
runners end to end over loopback HTTP (``LocalCore``, or a scripted loopback server),
and failed before its fix.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import pydantic
import pytest

from openagentcore import AsyncClient, Client
from openagentcore.local import FunctionCall, LocalCore
from openagentcore.runner import AsyncFunctionRunner, FunctionRunner, ServeTimeout
from openagentcore.store import MemoryResultStore

from ._scripted_server import SESSION_ID, TURN_ID, ScriptedServer, api_error, function_call
from ._support import (
    PAIRED,
    CallLog,
    Flavour,
    Harness,
    RunnerKind,
    applied_calls,
    flavoured,
    one_turn,
)

MakeCore = Callable[..., LocalCore]
MakeHarness = Callable[..., Harness]

RUNNER_COMBINATIONS = PAIRED


# -- a parameter validator that raises something other than ValueError ------------------


class _Parcel(pydantic.BaseModel):
    """A parameter type whose validator has an ordinary bug: for some inputs it raises
    ``TypeError`` or ``KeyError``, which pydantic does not turn into a ValidationError."""

    city: str

    @pydantic.field_validator("city")
    @classmethod
    def _known_city(cls, value: str) -> str:
        if value == "type-error":
            raise TypeError("validator bug")
        if value == "key-error":
            return {"paris": "Paris"}[value]
        return value


@pytest.mark.parametrize("city", ["type-error", "key-error"])
def test_validator_raising_non_value_error_is_an_argument_error_not_in_doubt(
    make_core: MakeCore, make_harness: MakeHarness, flavour: Flavour, city: str
) -> None:
    """The model picks arguments that make a parameter's validator raise ``TypeError``
    or ``KeyError``. ``RegisteredFunction.bind`` only turns pydantic's
    ``ValidationError`` into ``ArgumentsError``, so the exception escapes
    ``call_sync``/``call_async`` *before the function runs*; the drivers treat it like
    ``SystemExit`` (no result: the call is marked in doubt). The function never ran,
    yet the serve does not answer the call: ``serve(until="idle")`` waits until its
    timeout (``ServeTimeout``; with no timeout it never returns) and the call is
    reported in doubt ("may have had its effect") instead of getting the failed
    "Invalid arguments" result the model could correct."""
    core = make_core(scenario=one_turn([FunctionCall("ship", {"parcel": {"city": city}})]))
    harness = make_harness(core, shutdown_grace=0.5)
    runs = CallLog()

    def ship(parcel: _Parcel) -> str:
        """Ship a parcel."""
        runs.enter("ship", parcel.city)
        runs.leave()
        return "shipped"

    harness.runner.function(flavoured(ship, flavour))
    session_id = harness.create_session()
    (action,) = harness.wait_for_pending(session_id)

    report = harness.serve(session_id, timeout=6)

    assert runs.runs == []
    assert report.in_doubt == [], "a call whose function never started was put in doubt"
    applied = applied_calls(harness.client, session_id)[action.call_id]
    assert applied.output is not None, "the call was never answered"
    assert applied.output.status == "failed"
    assert applied.output.error is not None
    assert applied.output.error.startswith("Invalid arguments")


# -- server-sent data, against a scripted loopback server --------------------------------


@pytest.fixture
def scripted_server() -> Iterator[ScriptedServer]:
    server = ScriptedServer().start()
    yield server
    server.stop()


def _with_runner(
    kind: RunnerKind,
    server: ScriptedServer,
    body: Callable[[Any], Any],
    register: Callable[[Any], None],
    **options: Any,
) -> Any:
    """Build a runner of ``kind`` on ``server``, register functions, and run ``body``
    (given a function that calls a runner method by name, sync or async alike)."""
    options.setdefault("store", MemoryResultStore())
    options.setdefault("shutdown_grace", 0.5)
    if kind == "sync":
        client = Client(api_key="audit", base_url=server.base_url)
        runner = FunctionRunner(client, **options)
        register(runner)
        try:
            return body(lambda name, *a, **k: getattr(runner, name)(*a, **k))
        finally:
            runner.close()
            client.close()

    async def main() -> Any:
        aclient = AsyncClient(api_key="audit", base_url=server.base_url)
        arunner = AsyncFunctionRunner(aclient, **options)
        register(arunner)
        loop = asyncio.get_running_loop()

        def call(name: str, *a: Any, **k: Any) -> Any:
            future = asyncio.run_coroutine_threadsafe(getattr(arunner, name)(*a, **k), loop)
            return future.result()

        try:
            return await asyncio.to_thread(body, call)
        finally:
            await arunner.close()
            await aclient.close()

    return asyncio.run(main())


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize(
    "ids",
    [("call_\ud800", TURN_ID), ("call_x", "turn_\udc00")],
    ids=["lone-surrogate-call-id", "lone-surrogate-turn-id"],
)
def test_lone_surrogate_in_a_call_id_does_not_crash_the_runner(
    scripted_server: ScriptedServer, kind: RunnerKind, ids: tuple[str, str]
) -> None:
    """The server lists a call whose ``call_id`` (or ``turn_id``) holds a lone UTF-16
    surrogate (valid JSON: ``"\\ud800"``) next to an ordinary call. The store refuses
    the odd ids, and ``RunnerCore._on_store_refused`` builds the unsaved failure with
    ``idempotency_key_for``, which encodes the ids as strict UTF-8 and raises
    ``UnicodeEncodeError`` inside the core's round. The runner fails as a whole:
    ``serve`` raises ``RunnerError("The runner failed: UnicodeEncodeError(...)")``, and
    the ordinary call, which already ran, is never posted (the same happens again on
    every restart, so the Session can never be served)."""
    call_id, turn_id = ids
    scripted_server.required_actions = [
        function_call("call_ok", "add", '{"a": 1, "b": 2}'),
        function_call(call_id, "add", '{"a": 3, "b": 4}', turn_id),
    ]
    runs = CallLog()

    def register(runner: Any) -> None:
        @runner.function
        def add(a: int, b: int) -> int:
            """Add two integers."""
            runs.enter("add", (a, b))
            runs.leave()
            return a + b

    def body(call: Callable[..., Any]) -> Any:
        try:
            return call("serve", SESSION_ID, timeout=5)
        except ServeTimeout as timeout:
            return timeout.report

    body_result = _with_runner(kind, scripted_server, body, register)
    assert body_result is not None
    assert [event["success"] for event in scripted_server.results_for("call_ok")][:1] == [True], (
        "the ordinary call's result was never posted"
    )
    assert len([r for r in runs.runs if r[1] == (1, 2)]) == 1


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_run_turn_returns_by_its_timeout_when_the_server_asks_to_retry_later(
    scripted_server: ScriptedServer, kind: RunnerKind
) -> None:
    """``run_turn(timeout=1)``: the server answers the input POST 429 with
    ``Retry-After: 5``. ``run_turn`` passes the time left only as the per-attempt
    ``timeout`` (``RunnerBase._time_left``), but the client's retry loop
    (``_base_client._retried``) sleeps the server's ``Retry-After`` (honoured up to
    ``max_retry_after`` = 60 s) between attempts regardless of it, twice: ``run_turn``
    returns after ~10 s, ten times its timeout (up to ~2 minutes with a larger
    ``Retry-After``)."""
    scripted_server.status = "idle"
    scripted_server.post_rule = lambda body, n: api_error(
        429, "rate_limit_exceeded", "Slow down.", headers={"retry-after": "5"}
    )

    def body(call: Callable[..., Any]) -> float:
        started = time.monotonic()
        with contextlib.suppress(Exception):
            call("run_turn", SESSION_ID, "hello", timeout=1)
        return time.monotonic() - started

    took = _with_runner(kind, scripted_server, body, lambda runner: None)
    assert took < 4, f"run_turn(timeout=1) returned after {took:.1f} s"
