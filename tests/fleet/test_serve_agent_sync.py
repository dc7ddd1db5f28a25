"""``FunctionRunner.serve_agent``: the blocking runner serves an Agent's Sessions in a
fleet, through the same loop as ``AsyncFunctionRunner`` (on an event loop of its own),
with its own functions, hooks and store; ``stop()`` from another thread ends it, and the
``openagentcore worker`` command takes a FunctionRunner too."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import httpx
import pytest

from openagentcore import AsyncClient, Client, FunctionRunner, OpenAgentCoreError
from openagentcore.local import FunctionCall, LocalCore, Scenario, TurnScript
from openagentcore.runner import AsyncFunctionRunner, current_call
from openagentcore.runner._fleet import FleetReport
from openagentcore.runner._fleet_directory import SQLiteDirectory
from openagentcore.store import SQLiteResultStore
from openagentcore.types import FunctionCallItem, FunctionCallOutputItem

ROUNDS = 2
FAST = {"heartbeat_interval": 0.2, "worker_ttl": 2.0, "discovery_interval": 0.2, "park_after": 0.3}


def scripted_core() -> LocalCore:
    steps = [(FunctionCall("charge", {"order": f"r{step}"}),) for step in range(ROUNDS)]
    return LocalCore(scenario=Scenario(turns=[TurnScript(steps=steps, answer="done")]))


def connect(core: LocalCore) -> Client:
    return Client(api_key=core.api_key, base_url=core.base_url)


def outputs_per_call(client: Client, session_id: str) -> Counter[str]:
    items = list(client.sessions.items.list(session_id, order="asc"))
    outputs = Counter(i.call_id for i in items if isinstance(i, FunctionCallOutputItem))
    return Counter(
        {i.call_id: outputs[i.call_id] for i in items if isinstance(i, FunctionCallItem)}
    )


def test_function_runners_share_an_agents_sessions_until_stopped(tmp_path: Path) -> None:
    effects: Counter[str] = Counter()
    lock = threading.Lock()
    with scripted_core() as core, connect(core) as client:
        runners = [
            FunctionRunner(
                client, store=SQLiteResultStore(tmp_path / "calls.db"), poll_interval=0.2
            )
            for _ in range(2)
        ]
        for runner in runners:

            @runner.function
            def charge(order: str) -> str:
                """Charge the customer for an order."""
                with lock:
                    effects[current_call().call_id] += 1
                return f"charged {order}"

        agent = client.agents.create(name="billing", model="scripted", tools=runners[0].tools)
        reports: list[object] = []
        threads = [
            threading.Thread(
                target=lambda r=runner: reports.append(r.serve_agent(agent.id, **FAST))
            )
            for runner in runners
        ]
        for thread in threads:
            thread.start()
        watcher = SQLiteDirectory(tmp_path / "calls.db")
        sessions = [client.sessions.create(agent_id=agent.id, input=f"n{n}").id for n in range(4)]
        adopted = client.sessions.create(agent_id=agent.id, input="adopted").id
        runners[0].adopt(adopted)  # the Agent is read from the Session
        sessions.append(adopted)
        done = threading.Event()

        def settled() -> bool:
            return all(
                client.sessions.retrieve(s).status == "idle"
                and len(outputs_per_call(client, s)) == ROUNDS
                for s in sessions
            )

        while not done.wait(0.05):
            if settled():
                done.set()
        for runner in runners:
            runner.stop()  # from this thread: each serve_agent hands over and returns
        for thread in threads:
            thread.join(timeout=60)
            assert not thread.is_alive(), "serve_agent did not return after stop()"
        assert len(reports) == 2
        for session_id in sessions:
            assert set(outputs_per_call(client, session_id).values()) == {1}
        assert len(effects) == ROUNDS * len(sessions)
        assert set(effects.values()) == {1}
        assert watcher.status().workers == []  # both left
        watcher.close()
        for runner in runners:
            runner.close()
            # The fleet borrowed the runner's store; closing the runner closes it.
            with pytest.raises(Exception, match="closed"):
                runner.store.get(("s", "t", "c"))


def test_a_client_on_an_http_client_of_yours_is_refused_with_what_to_do(tmp_path: Path) -> None:
    with scripted_core() as core:
        client = Client(api_key=core.api_key, base_url=core.base_url, http_client=httpx.Client())
        refused = pytest.raises(OpenAgentCoreError, match="AsyncFunctionRunner with an AsyncClient")
        with FunctionRunner(client, store=tmp_path / "calls.db") as runner, refused:
            runner.serve_agent("agent_x")
        client.close()


def test_a_closed_function_runner_refuses_to_serve_an_agent(tmp_path: Path) -> None:
    with scripted_core() as core, connect(core) as client:
        runner = FunctionRunner(client, store=tmp_path / "calls.db")
        runner.close()
        with pytest.raises(Exception, match="closed; create a new one"):
            runner.serve_agent("agent_x")


APP = '''
from openagentcore import Client, FunctionRunner
runner = FunctionRunner(Client(), store={store!r}, poll_interval=0.2)

@runner.function
def charge(order: str) -> str:
    """Charge the customer for an order."""
    return f"charged {{order}}"
'''


@pytest.mark.slow
def test_the_worker_command_serves_a_function_runner_and_exits_0_on_sigterm(
    tmp_path: Path,
) -> None:
    store = tmp_path / "calls.db"
    (tmp_path / "sync_app.py").write_text(APP.format(store=str(store)))
    with scripted_core() as core, connect(core) as client:
        agent = client.agents.create(
            name="billing",
            model="scripted",
            tools=[
                {
                    "type": "function",
                    "name": "charge",
                    "description": "Charge the customer for an order.",
                    "parameters": {
                        "type": "object",
                        "properties": {"order": {"type": "string"}},
                        "required": ["order"],
                        "additionalProperties": False,
                    },
                }
            ],
        )
        session_id = client.sessions.create(agent_id=agent.id, input="go").id
        env = {**os.environ, "OPENAGENTCORE_BASE_URL": str(core.base_url)}
        env["OPENAGENTCORE_API_KEY"] = core.api_key
        worker = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sys; from openagentcore.cli import main; sys.exit(main(sys.argv[1:]))",
                "worker",
                "sync_app:runner",
                "--agent",
                agent.id,
                "--heartbeat-interval=0.2",
                "--discovery-interval=0.2",
                "--park-after=0.3",
            ],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            watcher = SQLiteDirectory(store)
            while not (
                client.sessions.retrieve(session_id).status == "idle"
                and len(outputs_per_call(client, session_id)) == ROUNDS
            ):
                assert worker.poll() is None, worker.communicate()
                threading.Event().wait(0.05)
            worker.send_signal(signal.SIGTERM)
            out, err = worker.communicate(timeout=60)
        finally:
            if worker.poll() is None:
                worker.kill()
        assert worker.returncode == 0, err
        assert json.loads(out.strip().splitlines()[-1])["worker"]
        assert watcher.status().workers == []
        watcher.close()
        assert set(outputs_per_call(client, session_id).values()) == {1}


def test_a_stop_sent_while_serve_agent_starts_is_kept(tmp_path: Path) -> None:
    """``stop()`` right after ``serve_agent`` began, while it still opens its directory
    (before the worker's loop runs): it used to be lost, and serve_agent ran on."""

    async def asynchronous(core: LocalCore) -> None:
        client = AsyncClient(api_key=core.api_key, base_url=core.base_url)
        runner = AsyncFunctionRunner(client, store=tmp_path / "async.db")
        serving = asyncio.create_task(runner.serve_agent("agent_x", **FAST))
        await asyncio.sleep(0)  # serve_agent runs up to opening its directory
        runner.stop()
        report = await asyncio.wait_for(serving, 30)
        assert report.acquired == 0
        await runner.close()
        await client.close()

    with scripted_core() as core, connect(core) as client:
        asyncio.run(asynchronous(core))
        runner = FunctionRunner(client, store=tmp_path / "sync.db")
        reports: list[FleetReport] = []
        serving = threading.Thread(target=lambda: reports.append(runner.serve_agent("agent_x")))
        serving.start()
        while not runner._fleets:  # serve_agent has begun; its loop may not run yet
            threading.Event().wait(0.001)
        runner.stop()
        serving.join(timeout=30)
        assert not serving.is_alive(), "serve_agent missed a stop() sent as it started"
        runner.close()
