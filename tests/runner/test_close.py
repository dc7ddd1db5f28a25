"""``close()`` ends the serves still running, and a closed runner refuses new ones.

A daemon that serves forever in one thread (or task) and an application that closes
the runner at shutdown in another: the serve must return its report, as after
``stop()``, not wait for ever on a runner whose pump is gone.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest

from openagentcore import AsyncClient, AsyncFunctionRunner, Client, FunctionRunner
from openagentcore.local import FunctionCall, LocalCore, Scenario, TurnScript
from openagentcore.runner import RunnerError, ServeReport

MakeCore = Callable[..., LocalCore]


def _wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def _idle_session(core: LocalCore) -> str:
    with Client(api_key=core.api_key, base_url=core.base_url) as client:
        return client.sessions.create(agent={"model": "scripted"}, input="hello").id


def test_close_ends_a_sync_serve_that_runs_forever(make_core: MakeCore) -> None:
    core = make_core(scenario=Scenario(turns=[TurnScript()]))
    session_id = _idle_session(core)
    with Client(api_key=core.api_key, base_url=core.base_url) as client:
        runner = FunctionRunner(client)
        outcome: list[object] = []
        serving = threading.Thread(
            target=lambda: outcome.append(runner.serve(session_id, until="forever"))
        )
        serving.start()
        _wait_until(lambda: bool(runner._core.serves))
        runner.close()
        serving.join(10)
        assert not serving.is_alive(), "serve(until='forever') outlived close()"
    assert len(outcome) == 1
    assert isinstance(outcome[0], ServeReport)


def test_close_ends_an_async_serve_that_runs_forever(make_core: MakeCore) -> None:
    core = make_core(scenario=Scenario(turns=[TurnScript()]))
    session_id = _idle_session(core)

    async def main() -> object:
        async with AsyncClient(api_key=core.api_key, base_url=core.base_url) as client:
            runner = AsyncFunctionRunner(client)
            serving = asyncio.create_task(runner.serve(session_id, until="forever"))
            await asyncio.sleep(0)  # the task attaches its serve before it first waits
            assert runner._core.serves
            await runner.close()
            return await asyncio.wait_for(serving, 10)

    assert isinstance(asyncio.run(main()), ServeReport)


def test_a_closed_sync_runner_refuses_to_serve(make_core: MakeCore) -> None:
    core = make_core(scenario=Scenario(turns=[TurnScript()]))
    session_id = _idle_session(core)
    with Client(api_key=core.api_key, base_url=core.base_url) as client:
        runner = FunctionRunner(client)
        runner.recover(session_id, timeout=10)
        runner.close()
        with pytest.raises(RunnerError, match="closed; create a new one"):
            runner.serve(session_id, timeout=10)


def test_a_serve_whose_call_outlasts_the_grace_raises_when_the_runner_closes(
    make_core: MakeCore,
) -> None:
    scenario = Scenario(turns=[TurnScript(steps=[[FunctionCall("wait", {})]])])
    core = make_core(scenario=scenario)
    with Client(api_key=core.api_key, base_url=core.base_url) as client:
        runner = FunctionRunner(client, shutdown_grace=0.3)
        started, release = threading.Event(), threading.Event()

        @runner.function
        def wait() -> str:
            """Wait until the test lets go."""
            started.set()
            release.wait(10)
            return "done"

        spec = {"model": "scripted", "tools": runner.tools}
        session_id = client.sessions.create(agent=spec, input="go").id
        errors: list[BaseException] = []

        def serve() -> None:
            try:
                runner.serve(session_id, until="forever")
            except BaseException as exc:
                errors.append(exc)

        serving = threading.Thread(target=serve)
        serving.start()
        try:
            assert started.wait(10)
            runner.close()
            serving.join(10)
            assert not serving.is_alive()
        finally:
            release.set()
    assert len(errors) == 1
    assert isinstance(errors[0], RunnerError)
    assert "closed before this serve ended" in str(errors[0])
