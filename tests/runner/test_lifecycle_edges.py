"""Lifecycle edges: what the operator and the process lifecycle do to a runner.

Each test pins one defect (it failed before its fix) found by attacking the runner's
lifecycle over loopback HTTP (LocalCore) with real threads, tasks, subprocesses and
signals: stop() and SIGTERM that are lost, an asyncio program that never exits, a
serve that outlives the main thread, and deadlines of ``math.inf`` that crashed the
sync runner.
"""

from __future__ import annotations

import asyncio
import math
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from openagentcore import AsyncClient, AsyncFunctionRunner, Client, FunctionRunner
from openagentcore.local import FunctionCall, LocalCore, Scenario, TurnScript
from openagentcore.runner import ServeReport, _signals
from openagentcore.store import MemoryResultStore

from ._support import applied_calls

MakeCore = Callable[..., LocalCore]


def _session(core: LocalCore, tools: list[dict[str, Any]] | None = None) -> str:
    """A Session whose first Turn starts at once (and asks for the scenario's calls)."""
    with Client(api_key=core.api_key, base_url=core.base_url) as client:
        agent: dict[str, Any] = {"model": "scripted"}
        if tools is not None:
            agent["tools"] = tools
        return client.sessions.create(agent=agent, input="go").id


def _one_call(name: str) -> Scenario:
    return Scenario(turns=[TurnScript(steps=[[FunctionCall(name, {})]]), TurnScript()])


# -- 1. math.inf as a timeout or a grace crashes the sync runner -------------------------


@pytest.mark.parametrize("method", ["serve", "recover", "run_turn"])
def test_sync_runner_accepts_an_infinite_timeout(make_core: MakeCore, method: str) -> None:
    """``timeout=math.inf`` ("no deadline") makes every sync entry point raise
    ``OverflowError: timestamp out of range for platform time_t``: ``_await_verdict``
    hands ``deadline - now`` (inf) to ``Condition.wait``, whose lock cannot wait that
    long. The async runner accepts the same value and serves normally."""
    core = make_core(scenario=_one_call("add"))
    with Client(api_key=core.api_key, base_url=core.base_url) as client:
        runner = FunctionRunner(client, store=MemoryResultStore())

        @runner.function
        def add() -> int:
            """Add."""
            return 3

        try:
            session_id = _session(core, runner.tools)
            if method == "run_turn":
                runner.serve(session_id, timeout=15)
                result = runner.run_turn(session_id, "again", timeout=math.inf)
                assert result.status == "completed"
            else:
                report = getattr(runner, method)(session_id, timeout=math.inf)
                assert isinstance(report, ServeReport)
        finally:
            runner.close()


def test_sync_runner_accepts_an_infinite_shutdown_grace(make_core: MakeCore) -> None:
    """``shutdown_grace=math.inf`` (wait for running functions however long they take)
    passes the constructor's check, but ``close()`` then raises ``OverflowError`` while
    a function runs (``Condition.wait(inf)`` in ``close``), leaving the runner half
    closed: its pump and pools keep running and the serve it should end goes on."""
    core = make_core(scenario=_one_call("work"))
    with Client(api_key=core.api_key, base_url=core.base_url) as client:
        runner = FunctionRunner(client, store=MemoryResultStore(), shutdown_grace=math.inf)
        started, release = threading.Event(), threading.Event()

        @runner.function
        def work() -> str:
            """Work until the test lets go."""
            started.set()
            release.wait(10)
            return "done"

        session_id = _session(core, runner.tools)
        outcome: list[object] = []
        serving = threading.Thread(
            target=lambda: outcome.append(runner.serve(session_id, until="forever")),
            daemon=True,
        )
        serving.start()
        letting_go = threading.Timer(0.3, release.set)
        try:
            assert started.wait(10)
            letting_go.start()
            runner.close()  # waits for the running call, as the infinite grace says
            serving.join(10)
            assert not serving.is_alive(), "serve(until='forever') outlived close()"
            assert len(outcome) == 1
            assert isinstance(outcome[0], ServeReport)
            (applied,) = applied_calls(client, session_id).values()
            assert applied.output is not None, "the call's result was never posted"
        finally:
            release.set()
            letting_go.cancel()
            if not runner._closing:  # the defect: close() raised half way
                runner.shutdown_grace = 1.0
                runner.close()


# -- 2. the async runner's inbox loses a stop() or a SIGTERM ------------------------------


class _Interleaved(deque):  # type: ignore[type-arg]
    """The inbox's deque, letting another thread (or a signal handler) put a message
    at the one instant of ``_Inbox.drain`` between ``list(items)`` and ``items.clear()``.
    With the GIL a thread switch (or a signal) can land there at any time; this only
    makes the instant certain instead of rare."""

    def __init__(self, items: deque, interleave: Callable[[], None]) -> None:  # type: ignore[type-arg]
        super().__init__(items)
        self._interleave: Callable[[], None] | None = interleave
        self.fired = threading.Event()

    def _now(self) -> None:
        interleave, self._interleave = self._interleave, None
        if interleave is not None:
            interleave()
            self.fired.set()

    def clear(self) -> None:  # copy-then-clear: the message put now is wiped
        self._now()
        super().clear()

    def popleft(self) -> Any:  # one by one: the message put now is taken next
        item = super().popleft()
        self._now()
        return item


def _stop_from_another_thread(runner: AsyncFunctionRunner) -> Callable[[], None]:
    def interleave() -> None:
        stopper = threading.Thread(target=runner.stop)
        stopper.start()
        stopper.join()

    return interleave


def _sigterm(runner: AsyncFunctionRunner) -> Callable[[], None]:
    def interleave() -> None:
        # The serve's handler (not the default one, which would end pytest) must be in.
        assert signal.getsignal(signal.SIGTERM) is _signals._handler
        signal.raise_signal(signal.SIGTERM)  # the handler runs before this returns

    return interleave


@pytest.mark.parametrize(
    "interleave", [_stop_from_another_thread, _sigterm], ids=["stop-from-thread", "sigterm"]
)
def test_async_stop_is_never_lost_by_the_inbox(
    make_core: MakeCore, interleave: Callable[[AsyncFunctionRunner], Callable[[], None]]
) -> None:
    """``stop()`` from another thread (documented as safe) and SIGTERM (whose handler
    calls ``_Inbox.put_threadsafe``) append to the inbox's deque while the pump may be
    in ``_Inbox.drain``, which copies the deque and then clears it in two steps: a
    message appended in between is wiped without ever reaching the core. The Stop is
    lost and ``serve(until="forever")`` never returns (a daemon ignores its SIGTERM)."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers are installed from the main thread only")
    core = make_core(scenario=Scenario(turns=[TurnScript()]))
    session_id = _session(core)

    async def main() -> tuple[bool, object]:
        async with AsyncClient(api_key=core.api_key, base_url=core.base_url) as client:
            runner = AsyncFunctionRunner(client, store=MemoryResultStore())
            serving = asyncio.create_task(runner.serve(session_id, until="forever"))
            deadline = time.monotonic() + 10
            while not any(s.connected and s.read_once for s in runner._core.serves.values()):
                assert time.monotonic() < deadline, "the serve never connected"
                await asyncio.sleep(0.01)
            inbox = runner._inbox
            assert inbox is not None
            hooked = _Interleaved(inbox._items, interleave(runner))
            inbox._items = hooked
            runner._wake()  # the pump drains at once
            while not hooked.fired.is_set():
                assert time.monotonic() < deadline, "the pump never drained"
                await asyncio.sleep(0.01)
            try:
                report = await asyncio.wait_for(asyncio.shield(serving), 5)
                returned = True
            except asyncio.TimeoutError:
                report, returned = None, False
            await runner.close()  # a second stop, which gets through
            if not returned:
                report = await serving
            return returned, report

    returned, report = asyncio.run(main())
    assert isinstance(report, ServeReport)
    assert returned, "the stop was lost: serve(until='forever') still ran 5 s after it"


# -- 3. asyncio.run() never returns after an AsyncFunctionRunner served -------------------

_UNCLOSED_RUNNER = textwrap.dedent(
    """
    import asyncio, sys
    from openagentcore import AsyncClient
    from openagentcore.runner import AsyncFunctionRunner
    from openagentcore.store import MemoryResultStore

    async def main():
        client = AsyncClient()
        runner = AsyncFunctionRunner(client, store=MemoryResultStore())
        await runner.recover(sys.argv[1], timeout=10)
        print("recovered", flush=True)
        # Returns with the runner open, as a program does when an exception (a
        # ServeTimeout, a bug) leaves main() before it reaches close().

    asyncio.run(main())
    print("exited", flush=True)
    """
)


def test_asyncio_run_returns_when_an_async_runner_was_left_open(
    make_core: MakeCore, tmp_path: Path
) -> None:
    """When ``asyncio.run`` ends it cancels the tasks left, the runner's pump among
    them. The pump waits in ``_Inbox.drain`` on ``asyncio.wait_for(ready.wait(), ...)``,
    and the serve's last ``_wake()`` has just set ``ready``: Python 3.11's ``wait_for``
    then returns the inner result and swallows the cancellation (the very race
    ``close()`` avoids with a flag), and ``_pump_rounds`` loops on while
    ``not self._closing``. ``asyncio.run`` waits for the pump for ever: the program
    hangs at exit instead of ending."""
    core = make_core(scenario=Scenario(turns=[TurnScript()]))
    session_id = _session(core)
    env = {
        **os.environ,
        "OPENAGENTCORE_BASE_URL": core.base_url,
        "OPENAGENTCORE_API_KEY": core.api_key,
    }
    errors = tmp_path / "stderr.txt"
    with errors.open("w") as stderr:
        child = subprocess.Popen(
            [sys.executable, "-c", _UNCLOSED_RUNNER, session_id],
            env=env,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    try:
        # The clock starts once the child has recovered: beside a busy core its start-up
        # alone can take most of the 20 s (the suite's timeout guards that part). The
        # hang this pins is at exit, and it lasts for ever.
        assert child.stdout is not None
        assert child.stdout.readline() == "recovered\n", errors.read_text()
        try:
            child.wait(timeout=20)  # "exited" is one short line: the pipe cannot fill
        except subprocess.TimeoutExpired:
            pytest.fail("asyncio.run() never returned 20 s after the runner recovered")
        rest = child.stdout.read()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, errors.read_text()
    assert rest.split() == ["exited"]


# -- 4. a sync serve in a thread that outlives the main thread crashes --------------------

_SERVING_THREAD = textwrap.dedent(
    '''
    import sys, threading
    from openagentcore import Client
    from openagentcore.runner import FunctionRunner
    from openagentcore.store import MemoryResultStore

    client = Client()
    runner = FunctionRunner(client, store=MemoryResultStore())

    @runner.function
    def add() -> int:
        """Add."""
        return 3

    def serve():
        try:
            report = runner.serve(sys.argv[1], timeout=20)
            print("served", report.calls_run, flush=True)
        except BaseException as exc:
            print("failed", repr(exc), flush=True)
        finally:
            runner.close()

    # A daemon's usual shape: serving in a thread; the interpreter waits for it.
    threading.Thread(target=serve).start()
    '''
)


def test_sync_serve_in_a_thread_survives_the_main_thread_returning(make_core: MakeCore) -> None:
    """When the main thread returns, Python begins its shutdown and
    ``concurrent.futures`` refuses new work ("cannot schedule new futures after
    interpreter shutdown") before the non-daemon serving thread is joined. The sync
    runner hands its Session reads, claims and posts to ``ThreadPoolExecutor``s
    (``_http_pool``, ``_functions``), so the first round after that raises inside
    ``carry`` (its remaining effects dropped), ``_fail`` fails every serve with
    ``RunnerError("The runner failed: RuntimeError(...)")`` and the Session's call is
    never served."""
    core = make_core(scenario=_one_call("add"))
    tools = [
        {
            "type": "function",
            "name": "add",
            "description": "Add.",
            "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
        }
    ]
    session_id = _session(core, tools)
    env = {
        **os.environ,
        "OPENAGENTCORE_BASE_URL": core.base_url,
        "OPENAGENTCORE_API_KEY": core.api_key,
    }
    done = subprocess.run(
        [sys.executable, "-c", _SERVING_THREAD, session_id],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "served 1", done.stdout
    with Client(api_key=core.api_key, base_url=core.base_url) as client:
        (applied,) = applied_calls(client, session_id).values()
        assert applied.output is not None
