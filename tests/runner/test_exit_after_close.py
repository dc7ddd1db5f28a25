"""A program ends once its runner is closed, even if a plain function that overran its
timeout still runs: its thread must not keep the interpreter alive (issue 23: a
function's non-daemon thread blocked interpreter exit for its whole run)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

_PROGRAM = textwrap.dedent(
    """
    import asyncio, sys, threading
    from openagentcore import AsyncClient, Client
    from openagentcore.local import FunctionCall, LocalCore, Scenario, TurnScript
    from openagentcore.runner import AsyncFunctionRunner, FunctionRunner
    from openagentcore.store import MemoryResultStore

    never = threading.Event()
    scenario = Scenario(turns=[TurnScript(steps=[[FunctionCall("stuck", {})]])])
    core = LocalCore(scenario=scenario).start()

    def stuck() -> str:
        never.wait()  # overruns its timeout, and never returns
        return "never"

    def sync() -> None:
        with Client(api_key=core.api_key, base_url=core.base_url) as client:
            runner = FunctionRunner(client, store=MemoryResultStore(), shutdown_grace=0)
            runner.function(timeout=0.2, description="Waits.")(stuck)
            with runner:
                session = client.sessions.create(
                    agent={"model": "scripted", "tools": runner.tools}, input="go"
                )
                report = runner.serve(session.id, timeout=60)
        print("errors", report.function_errors, flush=True)

    async def asynchronous() -> None:
        async with AsyncClient(api_key=core.api_key, base_url=core.base_url) as client:
            runner = AsyncFunctionRunner(client, store=MemoryResultStore(), shutdown_grace=0)
            runner.function(timeout=0.2, description="Waits.")(stuck)
            async with runner:
                session = await client.sessions.create(
                    agent={"model": "scripted", "tools": runner.tools}, input="go"
                )
                report = await runner.serve(session.id, timeout=60)
        print("errors", report.function_errors, flush=True)

    if sys.argv[1] == "sync":
        sync()
    else:
        asyncio.run(asynchronous())
    core.stop()
    print("closed", flush=True)
    """
)


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_closed_runner_lets_the_program_end_while_an_overrunning_function_runs(
    kind: str,
) -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", _PROGRAM, kind],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = process.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        pytest.fail(f"the program did not end after its runner closed:\n{out}\n{err[-2000:]}")
    assert process.returncode == 0, err[-2000:]
    assert "errors 1" in out
    assert "closed" in out
