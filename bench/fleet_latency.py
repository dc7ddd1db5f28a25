"""How fast a fleet of ``serve_agent`` worker processes reacts, on PostgreSQL (issue 25).

    python bench/fleet_latency.py [--only kill adopt discover wake join] [--trials 5]
                                  [--output bench/fleet_latency.json]

Each phase starts the emulator (its own process), a fresh schema on the PostgreSQL of
``OPENAGENTCORE_TEST_POSTGRES_DSN`` and ``serve_agent`` worker processes with the
default knobs unless the phase says otherwise. The function logs when each call starts
(one ``O_APPEND`` write per call, wall clock of this host), which is what "a call
starts" means below. Phases:

- ``kill``: 3 workers follow 12 busy Sessions; the one owning most is SIGKILLed.
  Measured from the kill: when every one of its Sessions has another owner (re-owned),
  and when every call those Sessions were waiting for has started on another worker or
  been answered (resumed). The function is idempotent, so calls the dead worker was
  running are run again. ``--trials`` times.
- ``adopt``: 2 idle workers (discovery and sweep every hour, so only adopt reaches
  them); a Session is created, its call pending, then adopted through an open
  directory: time from the start of ``adopt`` to the call's start. 40 samples.
- ``discover``: 2 workers at the defaults, no adopt: time from the Session's creation
  to its call's start. 15 samples.
- ``wake``: 2 workers with ``park_after=1``, ``sweep_interval=5``; 8 Sessions parked,
  then each sent a message (no adopt): time to its call's start. 8 samples.
- ``join``: 40 Sessions idle but not parked (``park_after=3600``) on 2 workers; a 3rd,
  4th and 5th worker join one at a time. After each join settles (no ownership change
  for 5 s): Sessions moved to the new worker, moved between the others, and the fair
  share.

Meanwhile the emulator is asked every 100 ms how many event streams each Session has
open; every answer for a Session with a stream is one sample.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _emulator import Emulator

from fleet import machine, tools
from openagentcore import AsyncClient, Client
from openagentcore.runner import AsyncFunctionRunner, current_call
from openagentcore.runner._fleet_directory import PostgresDirectory
from openagentcore.store import PostgresResultStore
from openagentcore.types import InputMessageEvent

DSN_ENV = "OPENAGENTCORE_TEST_POSTGRES_DSN"
RESULTS = Path(__file__).with_name("fleet_latency.json")
PHASES = ("kill", "adopt", "discover", "wake", "join")
POLL = 0.05


# -- the worker process ------------------------------------------------------------------


def worker_main(knobs_json: str) -> None:
    """``serve_agent`` with the knobs given until SIGTERM; ``work`` logs its start."""
    knobs = json.loads(knobs_json)
    agent_id = knobs.pop("agent")
    effects = os.environ["FLEET_EFFECTS"]
    work_seconds = float(os.environ["FLEET_WORK_SECONDS"])
    store = PostgresResultStore(os.environ[DSN_ENV], schema=os.environ["FLEET_SCHEMA"], pool_size=2)
    runner = AsyncFunctionRunner(AsyncClient(), store=store)

    @runner.function(idempotent=True)
    def work(n: int) -> int:
        """Say when the call started, then work a while."""
        call = current_call()
        line = {"session": call.session_id, "call": call.call_id, "pid": os.getpid()}
        line["at"] = time.time()
        descriptor = os.open(effects, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(descriptor, (json.dumps(line) + "\n").encode())
        finally:
            os.close(descriptor)
        time.sleep(work_seconds)
        return n

    async def serve() -> None:
        try:
            await runner.serve_agent(agent_id, **knobs)
        finally:
            await runner.close()
            await runner.client.close()

    asyncio.run(serve())


# -- the driver --------------------------------------------------------------------------


class Fleet:
    """The emulator, a schema, a saved Agent and worker processes sharing its Sessions."""

    def __init__(
        self,
        dsn: str,
        workdir: Path,
        *,
        turns: int,
        steps: int,
        work_seconds: float,
        knobs: dict[str, float],
    ) -> None:
        self.dsn, self.workdir, self.knobs = dsn, workdir, knobs
        self.emulator = Emulator(
            {"turns": turns, "steps": steps, "calls_per_step": 1, "ready_turn": False}
        )
        self.schema = f"oac_latency_{secrets.token_hex(4)}"
        self.client = Client(api_key=self.emulator.api_key, base_url=self.emulator.base_url)
        self.agent = self.client.agents.create(name="latency", model="scripted", tools=tools())
        self.effects_file = workdir / f"{self.schema}.jsonl"
        self.effects_file.touch()
        self.directory = PostgresDirectory(dsn, schema=self.schema)
        self.env = {
            **os.environ,
            "OPENAGENTCORE_BASE_URL": self.emulator.base_url,
            "OPENAGENTCORE_API_KEY": self.emulator.api_key,
            "FLEET_SCHEMA": self.schema,
            "FLEET_EFFECTS": str(self.effects_file),
            "FLEET_WORK_SECONDS": str(work_seconds),
        }
        self.workers: dict[int, subprocess.Popen[bytes]] = {}
        self.streams = StreamSampler(self.emulator)

    def start_worker(self) -> int:
        knobs = json.dumps({**self.knobs, "agent": self.agent.id})
        with (self.workdir / f"{self.schema}-worker-{len(self.workers)}.log").open("w") as log:
            process = subprocess.Popen(
                [sys.executable, __file__, "worker", knobs],
                env=self.env,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        self.workers[process.pid] = process
        return process.pid

    def wait_for_workers(self, count: int) -> None:
        wait_until(lambda: len(self.directory.status().workers) >= count, 60)

    def owners(self) -> dict[str, tuple[str | None, int]]:
        """Session -> (owner, epoch)."""
        return {s: (owner, epoch) for s, _, _, owner, epoch in self.directory.status().sessions}

    def create(self, *, adopt: bool) -> str:
        session_id = self.client.sessions.create(agent_id=self.agent.id, input="go").id
        if adopt:
            self.directory.adopt([(session_id, self.agent.id)])
        return session_id

    def starts(self) -> list[dict[str, Any]]:
        """Every call start so far: ``{"session", "call", "pid", "at"}``."""
        return [json.loads(line) for line in self.effects_file.read_text().splitlines()]

    def first_start(self, session_id: str, after: float, timeout: float = 60) -> float:
        """When a call of the Session first started after ``after`` (wall clock)."""
        found: list[float] = []

        def started() -> bool:
            found[:] = [
                s["at"] for s in self.starts() if s["session"] == session_id and s["at"] >= after
            ]
            return bool(found)

        wait_until(started, timeout, poll=0.01)
        return min(found)

    def close(self) -> None:
        self.streams.stop()
        for process in self.workers.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.workers.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.directory.close()
        self.client.close()
        self.emulator.close()
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as connection:
            connection.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')


class StreamSampler:
    """Asks the emulator every 100 ms for the open streams per Session, in a thread."""

    def __init__(self, emulator: Emulator) -> None:
        self.samples: list[int] = []
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(emulator,), daemon=True)
        self._thread.start()

    def _run(self, emulator: Emulator) -> None:
        while not self._stopped.wait(0.1):
            self.samples += emulator.streams().values()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()


def wait_until(condition: Callable[[], bool], timeout: float, *, poll: float = POLL) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout} s")
        time.sleep(poll)


def pending_calls(client: Client, session_id: str) -> set[str]:
    return {a.call_id for a in client.sessions.retrieve(session_id).pending_function_calls}


def kill_trial(dsn: str, workdir: Path) -> dict[str, Any]:
    fleet = Fleet(dsn, workdir, turns=1, steps=400, work_seconds=0.1, knobs={})
    try:
        for _ in range(3):
            fleet.start_worker()
        fleet.wait_for_workers(3)
        sessions = [fleet.create(adopt=True) for _ in range(12)]
        wait_until(lambda: all(owner for owner, _ in fleet.owners().values()), 60)
        wait_until(lambda: {s["session"] for s in fleet.starts()} >= set(sessions), 60)
        time.sleep(random.uniform(2.0, 5.0))  # a steady fleet: its rounds backed off
        workers = fleet.directory.status().workers
        victim, heartbeat_age, _ = max(workers, key=lambda w: w[2])
        owned = [s for s, (owner, _) in fleet.owners().items() if owner == victim]
        pid = int(victim.split(":")[1])
        killed_at = time.time()
        os.kill(pid, signal.SIGKILL)
        waiting = {(s, call) for s in owned for call in pending_calls(fleet.client, s)}
        reowned: dict[str, float] = {}
        resumed: dict[tuple[str, str], float] = {}
        deadline = time.monotonic() + 60
        while len(reowned) < len(owned) or len(resumed) < len(waiting):
            if time.monotonic() > deadline:
                raise TimeoutError(f"re-owned {reowned}, resumed {resumed} of {waiting}")
            now = time.time()
            for session_id, (owner, _) in fleet.owners().items():
                if session_id in owned and owner not in (None, victim):
                    reowned.setdefault(session_id, now - killed_at)
            for start in fleet.starts():
                key = (start["session"], start["call"])
                if key in waiting and start["pid"] != pid:
                    resumed.setdefault(key, start["at"] - killed_at)
            for session_id in {s for s, _ in waiting} - {s for s, _ in resumed}:
                still = pending_calls(fleet.client, session_id)
                for key in waiting:
                    if key[0] == session_id and key[1] not in still:
                        resumed.setdefault(key, now - killed_at)  # answered from the store
            time.sleep(POLL)
        return {
            "sessions_of_the_killed_worker": len(owned),
            "calls_it_left_waiting": len(waiting),
            "its_heartbeat_age_at_the_kill_s": round(heartbeat_age, 3),
            "reowned_s": round(max(reowned.values()), 3),
            "resumed_s": round(max(resumed.values()), 3),
            "stream_samples": fleet.streams.samples,
        }
    finally:
        fleet.close()


def first_call_phase(
    dsn: str, workdir: Path, phase: str, samples: int
) -> tuple[list[float], list[int], dict[str, float]]:
    """Seconds to the first call of new (``adopt``, ``discover``) or woken (``wake``)
    Sessions; with the stream samples and the knobs used."""
    knobs = {
        "adopt": {"discovery_interval": 3600.0, "sweep_interval": 3600.0},
        "discover": {},
        "wake": {"park_after": 1.0, "sweep_interval": 5.0},
    }[phase]
    fleet = Fleet(dsn, workdir, turns=2, steps=1, work_seconds=0.0, knobs=knobs)
    latencies = []
    try:
        for _ in range(2):
            fleet.start_worker()
        fleet.wait_for_workers(2)
        if phase == "wake":
            parked = [fleet.create(adopt=True) for _ in range(samples)]

            def all_parked() -> bool:
                rows = fleet.directory.status().sessions
                return len(rows) == len(parked) and all(row[2] == "parked" for row in rows)

            wait_until(all_parked, 60)
        for n in range(samples):
            # Random gaps, so the samples land in every phase of the workers' rounds.
            time.sleep(random.uniform(0.2, 3.0))
            if phase == "adopt":
                session_id = fleet.create(adopt=False)
                wait_until(lambda s=session_id: bool(pending_calls(fleet.client, s)), 10)
                began = time.time()
                fleet.directory.adopt([(session_id, fleet.agent.id)])
            elif phase == "discover":
                session_id = fleet.create(adopt=False)
                began = time.time()
            else:
                session_id = parked[n]
                fleet.client.sessions.events.create(
                    session_id, events=[InputMessageEvent.from_text("again")]
                )
                began = time.time()
            latencies.append(fleet.first_start(session_id, began) - began)
        return latencies, fleet.streams.samples, {**knobs}
    finally:
        fleet.close()


def join_phase(dsn: str, workdir: Path) -> tuple[list[dict[str, Any]], list[int]]:
    sessions = 40
    fleet = Fleet(dsn, workdir, turns=1, steps=1, work_seconds=0.0, knobs={"park_after": 3600.0})
    joins = []
    try:
        for _ in range(2):
            fleet.start_worker()
        fleet.wait_for_workers(2)
        for _ in range(sessions):
            fleet.create(adopt=True)
        before = settled(fleet)
        for workers in (3, 4, 5):
            pid = fleet.start_worker()
            fleet.wait_for_workers(workers)
            after = settled(fleet)
            newcomer = next(
                w for w, _, _ in fleet.directory.status().workers if w.split(":")[1] == str(pid)
            )
            moved = [s for s in after if after[s] != before.get(s)]
            joins.append(
                {
                    "workers_after": workers,
                    "fair_share": math.ceil(sessions / workers),
                    "moved_to_the_new_worker": sum(1 for s in moved if after[s][0] == newcomer),
                    "moved_between_the_others": sum(1 for s in moved if after[s][0] != newcomer),
                }
            )
            before = after
        return joins, fleet.streams.samples
    finally:
        fleet.close()


def settled(fleet: Fleet, quiet: float = 5.0) -> dict[str, tuple[str | None, int]]:
    """The ownership once it has not changed for ``quiet`` seconds, every Session owned."""
    last, since = fleet.owners(), time.monotonic()
    deadline = since + 120
    while time.monotonic() - since < quiet or not all(o for o, _ in last.values()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"ownership never settled: {last}")
        time.sleep(0.2)
        now = fleet.owners()
        if now != last:
            last, since = now, time.monotonic()
    return last


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]
    return {
        "samples": len(values),
        "median": round(statistics.median(ordered), 3),
        "p95": round(p95, 3),
        "min": round(ordered[0], 3),
        "max": round(ordered[-1], 3),
    }


def streams_summary(samples: list[int]) -> dict[str, Any]:
    one = sum(1 for n in samples if n == 1)
    return {
        "samples": len(samples),
        "exactly_one": one,
        "more_than_one": len(samples) - one,
        "share_with_one": round(one / len(samples), 4) if samples else None,
    }


def main(argv: list[str]) -> None:
    if argv[:1] == ["worker"]:
        worker_main(argv[1])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=PHASES, default=list(PHASES))
    parser.add_argument("--trials", type=int, default=5, help="kills (default 5)")
    parser.add_argument("--output", default=str(RESULTS))
    args = parser.parse_args(argv)
    dsn = os.environ.get(DSN_ENV)
    if not dsn:
        raise SystemExit(f"set {DSN_ENV} to a PostgreSQL database this benchmark may use")
    report: dict[str, Any] = {"machine": machine(), "phases": {}}
    streams: list[int] = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        for phase in args.only:
            if phase == "kill":
                trials = [kill_trial(dsn, workdir) for _ in range(args.trials)]
                for trial in trials:
                    streams += trial.pop("stream_samples")
                report["phases"]["kill"] = {
                    "worker_ttl_s": 10.0,
                    "reowned_s": percentiles([t["reowned_s"] for t in trials]),
                    "resumed_s": percentiles([t["resumed_s"] for t in trials]),
                    "trials": trials,
                }
            elif phase == "join":
                joins, samples = join_phase(dsn, workdir)
                streams += samples
                report["phases"]["join"] = {"sessions": 40, "joins": joins}
            else:
                count = {"adopt": 40, "discover": 15, "wake": 8}[phase]
                latencies, samples, knobs = first_call_phase(dsn, workdir, phase, count)
                streams += samples
                report["phases"][phase] = {
                    "knobs": knobs,
                    "first_call_s": percentiles(latencies),
                    "latencies_s": [round(value, 4) for value in latencies],
                }
            print(phase, json.dumps(report["phases"][phase], indent=1), flush=True)
    report["streams_per_session"] = streams_summary(streams)
    print("streams", json.dumps(report["streams_per_session"]))
    Path(args.output).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
