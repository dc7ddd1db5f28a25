"""``openagentcore worker`` processes share an Agent's Sessions on the emulator through
real PostgreSQL (or one SQLite file): one is SIGKILLed mid-call, another SIGTERMed, and
every Session still ends idle with each call answered once and no charge repeated."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from openagentcore import Client
from openagentcore.local import FunctionCall, LocalCore, Scenario, TurnScript
from openagentcore.runner import IN_DOUBT_ERROR
from openagentcore.runner._fleet_directory import Directory, PostgresDirectory, SQLiteDirectory
from openagentcore.types import FunctionCallItem, FunctionCallOutputItem

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
POSTGRES_DSN_ENV = "OPENAGENTCORE_TEST_POSTGRES_DSN"
ROUNDS = 5
SESSIONS = 8
TTL = 2.0
WORKER = [
    "-c",
    "import sys; from openagentcore.cli import main; sys.exit(main(sys.argv[1:]))",
    "worker",
    "fleet_app:runner",
    "--heartbeat-interval=0.3",
    f"--worker-ttl={TTL}",
    "--discovery-interval=0.3",
    "--park-after=0.5",
]


@pytest.fixture(params=["postgres", "sqlite"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, str]]:
    if request.param == "sqlite":
        yield {"FLEET_SQLITE": str(tmp_path / "calls.db")}
        return
    dsn = os.environ.get(POSTGRES_DSN_ENV)
    if not dsn:
        pytest.skip(f"set {POSTGRES_DSN_ENV} to run against PostgreSQL")
    import psycopg

    schema = f"oac_fleet_{secrets.token_hex(4)}"
    yield {"FLEET_POSTGRES_SCHEMA": schema, POSTGRES_DSN_ENV: dsn}
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def directory_of(where: dict[str, str]) -> Directory:
    if "FLEET_SQLITE" in where:
        return SQLiteDirectory(where["FLEET_SQLITE"])
    return PostgresDirectory(where[POSTGRES_DSN_ENV], schema=where["FLEET_POSTGRES_SCHEMA"])


def effects(path: Path) -> list[dict[str, object]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_killed_and_a_stopped_worker_hand_their_sessions_to_the_others(
    where: dict[str, str], tmp_path: Path
) -> None:
    steps = [(FunctionCall("charge", {"order": f"r{step}"}),) for step in range(ROUNDS)]
    scenario = Scenario(turns=[TurnScript(steps=steps, answer="done")])
    effects_log = tmp_path / "effects.jsonl"
    with (
        LocalCore(scenario=scenario, keepalive_interval=0.5) as core,
        Client(api_key=core.api_key, base_url=core.base_url) as client,
    ):
        tools = [
            {
                "type": "function",
                "name": "charge",
                "parameters": {
                    "type": "object",
                    "properties": {"order": {"type": "string"}},
                    "required": ["order"],
                },
                "description": "Charge the customer for an order.",
            }
        ]
        agent = client.agents.create(name="billing", model="scripted", tools=tools)
        env = {
            **os.environ,
            **where,
            "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
            "OPENAGENTCORE_BASE_URL": core.base_url,
            "OPENAGENTCORE_API_KEY": core.api_key,
            "FLEET_EFFECTS": str(effects_log),
        }
        workers: dict[int, subprocess.Popen[str]] = {}
        logs: dict[int, Path] = {}

        def start() -> subprocess.Popen[str]:
            log = tmp_path / f"worker-{len(logs)}.log"
            with log.open("w") as stderr:
                process = subprocess.Popen(
                    [sys.executable, *WORKER, "--agent", agent.id],
                    cwd=HERE,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=stderr,
                    text=True,
                )
            workers[process.pid] = process
            logs[process.pid] = log
            return process

        watcher = directory_of(where)
        try:
            for _ in range(3):
                start()
            deadline = time.monotonic() + 60
            while len(watcher.status().workers) < 3:
                assert time.monotonic() < deadline, [p.read_text() for p in logs.values()]
                time.sleep(0.05)
            session_ids = [
                client.sessions.create(agent_id=agent.id, input=f"batch {n}").id
                for n in range(SESSIONS)
            ]
            # SIGKILL the worker that started a charge last, while it runs.
            while not effects(effects_log):
                assert time.monotonic() < deadline, "no worker ran a function"
                time.sleep(0.02)
            victim = workers.pop(int(str(effects(effects_log)[-1]["pid"])))
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            # SIGTERM another: it finishes its calls, hands over and exits 0.
            stopped = next(iter(workers.values()))
            stopped.send_signal(signal.SIGTERM)
            stdout, _ = stopped.communicate(timeout=60)
            assert stopped.returncode == 0, logs[stopped.pid].read_text()
            assert "handed_over" in stdout
            del workers[stopped.pid]
            replacement = start()
            # In before the end: a SIGTERM that reaches a Python process before it runs
            # any code of ours (the interpreter starting) kills it with -15.
            while not any(f":{replacement.pid}:" in w for w, _, _ in watcher.status().workers):
                assert replacement.poll() is None, logs[replacement.pid].read_text()
                assert time.monotonic() < deadline + 60, "the replacement worker never started"
                time.sleep(0.05)

            def settled() -> bool:
                for session_id in session_ids:
                    if client.sessions.retrieve(session_id).status != "idle":
                        return False
                return True

            while not settled():
                for process in workers.values():
                    assert process.poll() is None, logs[process.pid].read_text()
                assert time.monotonic() < deadline + 60, watcher.status()
                time.sleep(0.1)
            for process in workers.values():
                process.send_signal(signal.SIGTERM)
                process.communicate(timeout=60)
                assert process.returncode == 0, logs[process.pid].read_text()
            # Every worker but the killed one left, handing its Sessions over.
            left = [worker for worker, _, _ in watcher.status().workers]
            assert all(f":{victim.pid}:" in worker for worker in left), left
        finally:
            for process in workers.values():
                if process.poll() is None:
                    process.kill()
                process.communicate()
        runs = Counter((str(e["session"]), str(e["call"])) for e in effects(effects_log))
        answered = 0
        for session_id in session_ids:
            items = list(client.sessions.items.list(session_id, order="asc"))
            calls = [i for i in items if isinstance(i, FunctionCallItem)]
            outputs = [i for i in items if isinstance(i, FunctionCallOutputItem)]
            by_call = {i.call_id: i for i in outputs}
            assert len(calls) == ROUNDS
            assert len(outputs) == ROUNDS, "a call was answered twice or not at all"
            for call in calls:
                ran = runs[(session_id, call.call_id)]
                assert ran <= 1, "a charge ran twice"
                if by_call[call.call_id].error != IN_DOUBT_ERROR:
                    assert ran == 1
                answered += 1
        assert answered == SESSIONS * ROUNDS
        watcher.close()


@pytest.mark.parametrize("signalled_at", ["import", "open"])
def test_a_worker_signalled_while_it_starts_exits_0(signalled_at: str, tmp_path: Path) -> None:
    """A supervisor may send SIGTERM while the worker imports the application or opens
    its directory: it exits 0 having handed over nothing, and is not killed by the
    signal (a restart loop would call that a crash)."""
    with LocalCore() as core:
        env = {
            **os.environ,
            "FLEET_SQLITE": str(tmp_path / "calls.db"),
            "FLEET_SIGTERM_AT": signalled_at,
            "FLEET_EFFECTS": str(tmp_path / "effects.jsonl"),
            "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
            "OPENAGENTCORE_BASE_URL": core.base_url,
            "OPENAGENTCORE_API_KEY": core.api_key,
        }
        worker = subprocess.run(
            [sys.executable, *WORKER, "--agent", "agent_0"],
            cwd=HERE,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert worker.returncode == 0, worker.stderr
    assert json.loads(worker.stdout)["handed_over"] == 0
