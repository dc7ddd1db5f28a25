"""A fleet of runner processes serving the same Sessions while workers are SIGKILLed.

Several ``fleet_worker.py`` processes share one result store (PostgreSQL, or one SQLite
file) and serve the same Sessions of one LocalCore. The test kills random workers while
calls run, starts a replacement for each, and then checks the promise of the fleet:
no effect happens twice unless the call was in doubt and its function is idempotent,
no call is lost, every Session ends idle, and a call in doubt that may not be repeated
is answered with the "outcome unknown" failure.
"""

from __future__ import annotations

import json
import os
import random
import secrets
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fleet_worker
import pytest

from openagentcore import Client
from openagentcore.local import FunctionCall, LocalCore, Scenario, TurnScript
from openagentcore.runner import IN_DOUBT_ERROR
from openagentcore.store import CallRecord, PostgresResultStore, ResultStore, SQLiteResultStore
from openagentcore.types import FunctionCallItem, FunctionCallOutputItem

pytestmark = pytest.mark.slow

WORKER = Path(fleet_worker.__file__)
#: A fleet that makes no progress for this long (no function run, no result on the
#: server, no worker exit) is hung. One that is merely slow is not: beside a busy core a
#: worker takes seconds to start, and a test starts up to ten.
STALL_SECONDS = 60
#: The whole test's hang guard, for what the stall check does not watch (start-up).
HANG_GUARD = 600
#: Rounds of parallel calls in each Session's Turn: two that may not be repeated, one
#: that may.
ROUND = ("charge", "reserve", "charge")


def scenario(rounds: int) -> Scenario:
    steps = [
        tuple(FunctionCall(name, {"order": f"r{step}c{slot}"}) for slot, name in enumerate(ROUND))
        for step in range(rounds)
    ]
    return Scenario(turns=[TurnScript(steps=steps, answer="{summary}")])


@dataclass
class FleetOutcome:
    """What the invariant check counted, for assertions on the chaos itself."""

    calls: int = 0
    charges_in_doubt: int = 0
    reserve_reruns: int = 0
    #: Claims taken over after a kill (attempts beyond the first), run or not.
    takeovers: int = 0

    @property
    def left_in_doubt(self) -> int:
        """Calls a kill left in doubt, however they were settled."""
        return self.charges_in_doubt + self.reserve_reruns + self.takeovers


@dataclass
class Fleet:
    """Sessions on one LocalCore and the worker processes that serve them."""

    core: LocalCore
    client: Client
    workdir: Path
    store_args: list[str]
    open_store: Callable[[], ResultStore]
    session_ids: list[str]
    workers: list[subprocess.Popen[str]] = field(default_factory=list)
    killed: list[subprocess.Popen[str]] = field(default_factory=list)
    logs: dict[int, Path] = field(default_factory=dict)
    worker_env: dict[str, str] = field(default_factory=dict)

    @property
    def effects_log(self) -> Path:
        return self.workdir / "effects.jsonl"

    def start_worker(self) -> subprocess.Popen[str]:
        env = {
            **os.environ,
            "OPENAGENTCORE_BASE_URL": self.core.base_url,
            "OPENAGENTCORE_API_KEY": self.core.api_key,
            **self.worker_env,
        }
        command = [sys.executable, str(WORKER), str(self.workdir / "sessions.json")]
        # stderr to a file: a pipe nobody drains could fill up with log lines and block.
        log = self.workdir / f"worker-{len(self.workers) + len(self.killed)}.log"
        with log.open("w") as stderr:
            worker = subprocess.Popen(
                [*command, str(self.effects_log), *self.store_args],
                env=env,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
        self.logs[worker.pid] = log
        self.workers.append(worker)
        return worker

    def kill(self, worker: subprocess.Popen[str]) -> None:
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        self.workers.remove(worker)
        self.killed.append(worker)

    def wait_for_first_effect(self) -> None:
        """Wait until some worker ran a function; every worker ending first fails."""
        while not self.effects():
            assert any(w.poll() is None for w in self.workers), "no worker ran a function"
            time.sleep(0.05)

    def effects(self) -> list[dict[str, Any]]:
        if not self.effects_log.exists():
            return []
        return [json.loads(line) for line in self.effects_log.read_text().splitlines()]

    def all_idle(self) -> bool:
        return all(self.client.sessions.retrieve(s).status == "idle" for s in self.session_ids)

    def wait_until_settled(self) -> list[dict[str, Any]]:
        """Wait for every live worker to exit cleanly, which each does once every
        Session is idle; returns the workers' summaries. A worker that fails fails the
        test. No clock: on a loaded machine settling takes what it takes; a fleet that
        stops making progress fails (see STALL_SECONDS)."""
        summaries = []
        for worker in self.workers:
            stdout = self._output_while_progressing(worker)
            assert worker.returncode == 0, self.logs[worker.pid].read_text()
            summary = json.loads(stdout.strip().splitlines()[-1])
            assert summary["not_idle"] == [], summary
            summaries.append(summary)
        assert self.all_idle()
        return summaries

    def _output_while_progressing(self, worker: subprocess.Popen[str]) -> str:
        """The worker's stdout once it exits, however long that takes while the fleet
        makes progress; a fleet that stalls for STALL_SECONDS fails the test."""
        seen = self._progress()
        while True:
            try:
                stdout, _ = worker.communicate(timeout=STALL_SECONDS)
                return stdout
            except subprocess.TimeoutExpired:
                now = self._progress()
                assert now != seen, f"the fleet made no progress in {STALL_SECONDS} s: {now}"
                seen = now

    def _progress(self) -> tuple[int, int, int]:
        """(functions run, results on the server, workers exited): each only grows."""
        results = sum(len(self.core.stored_results(s)) for s in self.session_ids)
        exited = sum(worker.poll() is not None for worker in self.workers)
        return len(self.effects()), results, exited

    def run_with_kills(
        self, *, workers: int, kills: int, seed: int, gap: tuple[float, float]
    ) -> int:
        """Start ``workers``; once calls run, every ``gap`` seconds (random) SIGKILL the
        worker that started a function last and start a replacement, up to ``kills``
        times; then wait until every Session is idle."""
        chance = random.Random(seed)
        for _ in range(workers):
            self.start_worker()
        self.wait_for_first_effect()
        landed = 0
        while landed < kills and not self.all_idle():
            time.sleep(chance.uniform(*gap))
            victim = self._worker_inside_a_call() or self._busy_worker()
            self.kill(victim or chance.choice(self.workers))
            landed += 1
            self.start_worker()
        self.wait_until_settled()
        return landed

    def _worker_inside_a_call(self, wait: float = 1.0) -> subprocess.Popen[str] | None:
        """A live worker whose function started so recently that it still runs (each
        takes ``WORK_SECONDS``), waiting up to ``wait`` seconds for one: killing it
        leaves that call in doubt, whatever the machine's speed."""
        give_up = time.monotonic() + wait
        while time.monotonic() < give_up:
            alive = {worker.pid: worker for worker in self.workers}
            now = time.time()
            for effect in reversed(self.effects()):
                if effect["pid"] in alive and now - effect["at"] < fleet_worker.WORK_SECONDS / 2:
                    return alive[effect["pid"]]
            time.sleep(0.01)
        return None

    def _busy_worker(self) -> subprocess.Popen[str] | None:
        """The live worker that started a function last: most likely inside a call, so
        killing it leaves a call in doubt."""
        alive = {worker.pid: worker for worker in self.workers}
        for effect in reversed(self.effects()):
            if effect["pid"] in alive:
                return alive[effect["pid"]]
        return None

    def check_invariants(self) -> FleetOutcome:
        """What must hold however the workers died."""
        killed_pids = {worker.pid for worker in self.killed}
        runs = Counter((e["session"], e["call"]) for e in self.effects())
        runners = {(e["session"], e["call"]): e["pid"] for e in self.effects()}
        outcome = FleetOutcome()
        store = self.open_store()
        try:
            for session_id in self.session_ids:
                assert self.client.sessions.retrieve(session_id).status == "idle"
                records = {r.key.call_id: r for r in store.find(session_id=session_id)}
                submitted = self.core.stored_results(session_id)
                for call, output in _calls_and_outputs(self.client, session_id):
                    outcome.calls += 1
                    assert output is not None, f"call {call.call_id} was lost"
                    record = records[call.call_id]
                    assert record.result is not None
                    # The server holds byte for byte the result the store saved first.
                    assert submitted[call.call_id] == record.result
                    assert output.error == record.result.get("error")
                    ran = runs[(session_id, call.call_id)]
                    order = call.decoded_arguments()["order"]
                    if call.name == "charge":
                        # A charge is failed in doubt only if its worker died mid-call.
                        _check_charge(
                            record, ran, order, runners.get((session_id, call.call_id)), killed_pids
                        )
                        outcome.charges_in_doubt += record.result["success"] is False
                    else:
                        # Idempotent: re-run when in doubt, at most once per claim, and
                        # failed in doubt only once its claims reached max_attempts (3).
                        assert ran <= record.attempts
                        if record.result["success"]:
                            assert record.result["output"] == f"reserved {order}"
                            assert ran >= 1
                        else:
                            assert record.result["error"] == IN_DOUBT_ERROR, record.result
                            assert record.attempts >= 3, record
                        outcome.reserve_reruns += ran - 1
                    outcome.takeovers += record.attempts - 1
        finally:
            store.close()
        return outcome


def _check_charge(
    record: CallRecord, ran: int, order: str, runner_pid: int | None, killed: set[int]
) -> None:
    assert record.result is not None
    assert ran <= 1, f"charge {order} of {record.key} ran {ran} times"
    if record.result["success"]:
        assert ran == 1
        assert record.result["output"] == f"charged {order}"
    else:
        # Failed only because its worker died between claim and saved result.
        assert record.result["error"] == IN_DOUBT_ERROR
        assert ran == 0 or runner_pid in killed, "a live worker's charge was failed in doubt"


def _calls_and_outputs(
    client: Client, session_id: str
) -> list[tuple[FunctionCallItem, FunctionCallOutputItem | None]]:
    items = list(client.sessions.items.list(session_id, order="asc"))
    outputs = Counter(i.call_id for i in items if isinstance(i, FunctionCallOutputItem))
    assert all(count == 1 for count in outputs.values()), f"duplicated outputs: {outputs}"
    by_call = {i.call_id: i for i in items if isinstance(i, FunctionCallOutputItem)}
    return [(i, by_call.get(i.call_id)) for i in items if isinstance(i, FunctionCallItem)]


@pytest.fixture
def make_fleet(tmp_path: Path) -> Iterator[Callable[..., Fleet]]:
    fleets: list[Fleet] = []

    def make(
        *, sessions: int, rounds: int, store_args: list[str], open_store: Callable[[], ResultStore]
    ) -> Fleet:
        core = LocalCore(scenario=scenario(rounds), keepalive_interval=0.5).start()
        client = Client(api_key=core.api_key, base_url=core.base_url)
        tools = fleet_worker.tools()
        session_ids = [
            client.sessions.create(
                agent={"model": "scripted", "tools": tools}, input=f"process batch {n}"
            ).id
            for n in range(sessions)
        ]
        (tmp_path / "sessions.json").write_text(json.dumps(session_ids))
        fleet = Fleet(core, client, tmp_path, store_args, open_store, session_ids)
        fleets.append(fleet)
        return fleet

    yield make
    for fleet in fleets:
        for worker in fleet.workers:
            if worker.poll() is None:
                worker.kill()
            worker.wait()  # killed, or already read by wait_until_settled
        fleet.client.close()
        fleet.core.stop()


@pytest.fixture
def postgres_table() -> Iterator[tuple[str, str, str]]:
    """``(dsn, schema, table)`` private to one test; the schema is dropped after it."""
    dsn = os.environ.get(fleet_worker.POSTGRES_DSN_ENV)
    if not dsn:
        pytest.skip(
            f"set {fleet_worker.POSTGRES_DSN_ENV} to a PostgreSQL DSN (e.g. "
            "postgresql://postgres@127.0.0.1:5432/test) to run the PostgreSQL fleet test"
        )
    import psycopg

    schema = f"oac_fleet_{secrets.token_hex(4)}"
    yield dsn, schema, "calls"
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.mark.timeout(HANG_GUARD)
@pytest.mark.postgres
def test_postgres_fleet_of_four_survives_random_kills(
    make_fleet: Callable[..., Fleet], postgres_table: tuple[str, str, str]
) -> None:
    dsn, schema, table = postgres_table
    fleet = make_fleet(
        sessions=20,
        rounds=6,  # enough work that the kills land before the Sessions are idle
        store_args=["--postgres", f"{schema}.{table}"],
        open_store=lambda: PostgresResultStore(dsn, schema=schema, table=table, pool_size=1),
    )

    kills = fleet.run_with_kills(workers=4, kills=6, seed=6, gap=(0.3, 0.7))

    outcome = fleet.check_invariants()
    assert outcome.calls == 20 * 6 * len(ROUND)
    assert kills >= 3, f"only {kills} kills landed before the Sessions were idle"
    assert outcome.left_in_doubt >= 1, "no kill left a call in doubt"


@pytest.mark.timeout(HANG_GUARD)
def test_sqlite_fleet_on_one_file_survives_random_kills(
    make_fleet: Callable[..., Fleet], tmp_path: Path
) -> None:
    database = tmp_path / "calls.db"
    fleet = make_fleet(
        sessions=8,
        rounds=3,
        store_args=["--sqlite", str(database)],
        open_store=lambda: SQLiteResultStore(database),
    )

    kills = fleet.run_with_kills(workers=3, kills=3, seed=3, gap=(0.3, 0.6))

    outcome = fleet.check_invariants()
    assert outcome.calls == 8 * 3 * len(ROUND)
    assert kills >= 2, f"only {kills} kills landed before the Sessions were idle"
    assert outcome.left_in_doubt >= 1, "no kill left a call in doubt"


def drop_connections_mid_transaction(dsn: str, table: str, application: str) -> int:
    """Terminate the backends of every worker while each waits inside a transaction,
    as a database restart does; returns how many were terminated.

    A lock on the table holds each worker's next store call mid-transaction, so the
    drop cannot fall between transactions, where the pool would quietly reconnect.
    """
    import psycopg

    with psycopg.connect(dsn) as locker, psycopg.connect(dsn, autocommit=True) as admin:
        locker.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
        deadline = time.monotonic() + 10
        waiting = 0
        while waiting == 0 and time.monotonic() < deadline:
            time.sleep(0.5)  # let every busy worker reach its next store call
            row = admin.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE application_name = %s AND wait_event_type = 'Lock'",
                (application,),
            ).fetchone()
            waiting = row[0] if row else 0
        row = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = %s",
            (application,),
        ).fetchone()
        locker.rollback()
    assert waiting >= 1, "no worker was inside a store call"
    return row[0] if row else 0


@pytest.fixture
def dropping_fleet(
    make_fleet: Callable[..., Fleet], postgres_table: tuple[str, str, str]
) -> tuple[Fleet, Callable[[], int]]:
    """Three PostgreSQL workers at work, their connections tagged so that they can be
    told apart, and a function that drops all of them mid-transaction."""
    dsn, schema, table = postgres_table
    fleet = make_fleet(
        sessions=10,
        rounds=3,
        store_args=["--postgres", f"{schema}.{table}"],
        open_store=lambda: PostgresResultStore(dsn, schema=schema, table=table, pool_size=1),
    )
    separator = "&" if "?" in dsn else "?"
    fleet.worker_env[fleet_worker.POSTGRES_DSN_ENV] = f"{dsn}{separator}application_name={schema}"
    for _ in range(3):
        fleet.start_worker()
    fleet.wait_for_first_effect()
    return fleet, lambda: drop_connections_mid_transaction(dsn, f'"{schema}"."{table}"', schema)


@pytest.mark.timeout(HANG_GUARD)
@pytest.mark.postgres
def test_postgres_fleet_rides_out_dropped_connections_without_restarts(
    dropping_fleet: tuple[Fleet, Callable[[], int]],
) -> None:
    fleet, drop_connections = dropping_fleet

    assert drop_connections() >= 1
    summaries = fleet.wait_until_settled()

    outcome = fleet.check_invariants()
    assert outcome.calls == 10 * 3 * len(ROUND)
    assert outcome.charges_in_doubt == 0, "a database blip must not put calls in doubt"
    assert sum(summary["store_errors"] for summary in summaries) >= 1, (
        "no worker noticed the dropped connections"
    )
