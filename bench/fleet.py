"""Throughput of a runner fleet: calls per second for 1, 2, 4 and 8 worker processes on
one PostgreSQL result store, against one worker on SQLite, on the same workload.

    python bench/fleet.py [--dsn postgresql://...] [--runs 3] [--sessions 40]

The emulator runs in its own process (``python -m openagentcore.local``) with a
scenario of ``--rounds`` rounds of ``--calls`` parallel calls to a no-op function in
each Session's first Turn. Every worker process serves every Session with one
``AsyncFunctionRunner`` (defaults otherwise), so workers compete for each call through
the store's claims. Timing starts when every worker has opened its store and is told to
go, and stops when the last one returns (every Session idle). Prints a markdown table
(median of ``--runs``) and writes ``bench/fleet_results.json``.

With ``--mode agent split [all] --output FILE`` it compares, on PostgreSQL, workers that
share the Sessions by themselves (``agent``: ``serve_agent``, the Sessions created with
a saved Agent), workers given a share each by hand (``split``) and workers that all
serve every Session (``all``), and writes ``{"rows": [{"mode", "workers",
"cpu_ms_per_call", "calls_per_s"}, ...]}`` to FILE. In ``agent`` mode the clock starts
once every worker has joined, includes creating and adopting the Sessions, and stops
once every Session is idle (the driver asks the emulator every 50 ms); the workers are
then stopped with SIGTERM.

The PostgreSQL DSN comes from ``--dsn`` or ``OPENAGENTCORE_TEST_POSTGRES_DSN``; each
run uses a fresh schema, dropped afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from openagentcore import AsyncClient, Client
from openagentcore.runner import AsyncFunctionRunner, FunctionRunner
from openagentcore.store import MemoryResultStore, PostgresResultStore, SQLiteResultStore

RESULTS = Path(__file__).with_name("fleet_results.json")
DSN_ENV = "OPENAGENTCORE_TEST_POSTGRES_DSN"
POSTGRES_WORKERS = (1, 2, 4, 8)
EMULATOR_OPTIONS = ("--port", "0", "--keepalive", "5", "--scenario")


# -- the worker process ------------------------------------------------------------------


#: Functions this worker process ran (the agent mode counts here: its serves come and go).
RUNS = [0]


def register(runner: FunctionRunner | AsyncFunctionRunner) -> None:
    @runner.function
    def work(n: int) -> int:
        """Do nothing useful: the benchmark measures the runner, not the function."""
        RUNS[0] += 1
        return n


def worker_main(sessions_file: Path, store_spec: str, share: str) -> None:
    """Open the store, say ``ready``, wait for ``go`` on stdin, serve, print a summary.

    ``share`` is ``all`` or ``I/N``: serve every N-th Session starting at the I-th.
    """
    session_ids: list[str] = json.loads(sessions_file.read_text())
    if share.startswith("agent:"):
        session_ids = []
    elif share != "all":
        index, count = (int(part) for part in share.split("/"))
        session_ids = session_ids[index::count]
    kind, _, where = store_spec.partition(":")
    if kind == "sqlite":
        store: SQLiteResultStore | PostgresResultStore = SQLiteResultStore(where)
    else:
        schema, table = where.split(".")
        store = PostgresResultStore(os.environ[DSN_ENV], schema=schema, table=table)
    print("ready", flush=True)
    if not share.startswith("agent:"):  # an agent worker joins the fleet at once
        sys.stdin.readline()
    started = time.process_time()
    if share.startswith("agent:"):
        calls_run = asyncio.run(_serve_agent(share.removeprefix("agent:"), store))
    else:
        calls_run = asyncio.run(_serve(session_ids, store))
    cpu = time.process_time() - started
    print(json.dumps({"calls_run": calls_run, "cpu_seconds": cpu}), flush=True)


async def _serve(session_ids: list[str], store: SQLiteResultStore | PostgresResultStore) -> int:
    async with AsyncClient() as client:
        runner = AsyncFunctionRunner(client, store=store)
        register(runner)
        try:
            reports = await asyncio.gather(
                *(runner.serve(session_id, timeout=600) for session_id in session_ids)
            )
        finally:
            await runner.close()
    not_idle = [report.session_id for report in reports if report.final_status != "idle"]
    if not_idle:
        raise SystemExit(f"Sessions not idle at the end: {not_idle}")
    return sum(report.calls_run for report in reports)


async def _serve_agent(agent_id: str, store: SQLiteResultStore | PostgresResultStore) -> int:
    """Serve the Agent's Sessions with the other workers until SIGTERM."""
    async with AsyncClient() as client:
        runner = AsyncFunctionRunner(client, store=store)
        register(runner)
        try:
            await runner.serve_agent(agent_id)
        finally:
            await runner.close()
    return RUNS[0]


# -- the driver --------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    sessions: int
    rounds: int
    calls: int

    @property
    def total_calls(self) -> int:
        return self.sessions * self.rounds * self.calls

    def scenario(self) -> dict[str, Any]:
        step = [{"name": "work", "arguments": {"n": n}} for n in range(self.calls)]
        return {"turns": [{"steps": [step] * self.rounds, "answer": "Done."}]}


@dataclass(frozen=True)
class RunResult:
    seconds: float
    worker_cpu_seconds: float
    calls_run: int


class Emulator:
    """``python -m openagentcore.local`` in its own process."""

    def __init__(self, scenario_file: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "openagentcore.local", *EMULATOR_OPTIONS, str(scenario_file)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        announced: dict[str, str] = {}
        for line in self.process.stdout:
            name, _, value = line.strip().removeprefix("export ").partition("=")
            if name.startswith("OPENAGENTCORE_"):
                announced[name] = value
            if len(announced) == 2:
                break
        self.env = announced

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


def tools() -> list[dict[str, Any]]:
    client = Client(api_key="unused", base_url="http://127.0.0.1:9/v1")
    with client, FunctionRunner(client, store=MemoryResultStore()) as runner:
        register(runner)
        return runner.tools


def agent_run(workload: Workload, workers: int, dsn: str) -> RunResult:
    """``workers`` processes run ``serve_agent``; once all have joined the fleet the
    clock starts and the Sessions are created and adopted one by one (timed too); it
    stops when every Session is idle."""
    from openagentcore.runner._fleet_directory import PostgresDirectory

    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        scenario_file = workdir / "scenario.json"
        scenario_file.write_text(json.dumps(workload.scenario()))
        emulator = Emulator(scenario_file)
        schema = f"oac_bench_{secrets.token_hex(4)}"
        env = {**os.environ, **emulator.env, DSN_ENV: dsn}
        client = Client(
            api_key=env["OPENAGENTCORE_API_KEY"], base_url=env["OPENAGENTCORE_BASE_URL"]
        )
        processes: list[subprocess.Popen[str]] = []
        try:
            agent = client.agents.create(name="bench", model="scripted", tools=tools())
            sessions_file = workdir / "sessions.json"
            sessions_file.write_text("[]")
            command = [sys.executable, __file__, "worker", str(sessions_file)]
            spec = f"postgres:{schema}.calls"
            processes = _start_workers(
                [[*command, spec, f"agent:{agent.id}"] for _ in range(workers)],
                env,
                stdin=subprocess.DEVNULL,
            )
            directory = PostgresDirectory(dsn, schema=schema, table="calls")
            while len(directory.status().workers) < workers:
                time.sleep(0.05)
            started = time.perf_counter()
            session_ids = []
            for n in range(workload.sessions):
                # As a web application does: create, then hand it to the fleet at once.
                session_id = client.sessions.create(agent_id=agent.id, input=f"job {n}").id
                directory.adopt([(session_id, agent.id)])
                session_ids.append(session_id)
            directory.close()
            pending = set(session_ids)
            while pending:
                time.sleep(0.05)
                pending = {s for s in pending if client.sessions.retrieve(s).status != "idle"}
            seconds = time.perf_counter() - started
            summaries = []
            for process in processes:
                process.send_signal(signal.SIGTERM)
            for process in processes:
                assert process.stdout is not None
                output = process.stdout.read()
                if process.wait() != 0:
                    raise RuntimeError(f"a worker failed (exit {process.returncode})")
                summaries.append(json.loads(output.strip().splitlines()[-1]))
            return RunResult(
                seconds=seconds,
                worker_cpu_seconds=sum(s["cpu_seconds"] for s in summaries),
                calls_run=sum(s["calls_run"] for s in summaries),
            )
        finally:
            for process in processes:
                if process.poll() is None:
                    process.kill()
            client.close()
            emulator.stop()
            _drop_schema(dsn, schema)


def modes_main(args: argparse.Namespace) -> None:
    """``--mode``: the rows the fleet's numbers are checked against."""
    if not args.dsn:
        raise SystemExit(f"set {DSN_ENV} or pass --dsn to benchmark the modes on PostgreSQL")
    workload = Workload(args.sessions, args.rounds, args.calls)
    rows = []
    for mode in args.mode:
        for workers in args.workers:
            runs = [
                agent_run(workload, workers, args.dsn)
                if mode == "agent"
                else one_run(workload, workers, "postgres", args.dsn, partitioned=mode == "split")
                for _ in range(args.runs)
            ]
            for run in runs:
                if run.calls_run != workload.total_calls:
                    raise RuntimeError(
                        f"{mode} x{workers}: {run.calls_run} calls run, "
                        f"{workload.total_calls} expected"
                    )
            seconds = statistics.median(run.seconds for run in runs)
            cpu = statistics.median(run.worker_cpu_seconds for run in runs)
            row = {
                "mode": mode,
                "workers": workers,
                "cpu_ms_per_call": round(1000 * cpu / workload.total_calls, 2),
                "calls_per_s": round(workload.total_calls / seconds, 1),
                "runs": [asdict(run) for run in runs],
            }
            rows.append(row)
            print(
                f"{mode} x{workers}: {row['calls_per_s']} calls/s, "
                f"{row['cpu_ms_per_call']} ms CPU per call",
                file=sys.stderr,
            )
    document = {
        "machine": {**machine(), "postgres": _postgres_version(args.dsn)},
        "workload": {**asdict(workload), "total_calls": workload.total_calls},
        "rows": rows,
    }
    Path(args.output).write_text(json.dumps(document, indent=2) + "\n")


def one_run(
    workload: Workload, workers: int, store: str, dsn: str | None, *, partitioned: bool
) -> RunResult:
    """Fresh emulator, Sessions and store; ``workers`` processes serve until all idle,
    each every Session or (``partitioned``) its own share of them."""
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        scenario_file = workdir / "scenario.json"
        scenario_file.write_text(json.dumps(workload.scenario()))
        emulator = Emulator(scenario_file)
        schema = f"oac_bench_{secrets.token_hex(4)}"
        try:
            env = {**os.environ, **emulator.env}
            if store == "postgres":
                assert dsn is not None
                env[DSN_ENV] = dsn
                spec = f"postgres:{schema}.calls"
            else:
                spec = f"sqlite:{workdir / 'calls.db'}"
            sessions_file = workdir / "sessions.json"
            sessions_file.write_text(json.dumps(_create_sessions(emulator.env, workload)))
            return _race(workers, sessions_file, spec, env, partitioned=partitioned)
        finally:
            emulator.stop()
            if store == "postgres":
                _drop_schema(dsn, schema)


def _create_sessions(env: dict[str, str], workload: Workload) -> list[str]:
    agent = {"model": "scripted", "tools": tools()}
    with Client(
        api_key=env["OPENAGENTCORE_API_KEY"], base_url=env["OPENAGENTCORE_BASE_URL"]
    ) as client:
        return [
            client.sessions.create(agent=agent, input=f"job {n}").id
            for n in range(workload.sessions)
        ]


def _race(
    workers: int, sessions_file: Path, spec: str, env: dict[str, str], *, partitioned: bool
) -> RunResult:
    command = [sys.executable, __file__, "worker", str(sessions_file), spec]
    processes = _start_workers(
        [[*command, f"{index}/{workers}" if partitioned else "all"] for index in range(workers)],
        env,
        stdin=subprocess.PIPE,
    )
    started = time.perf_counter()
    for process in processes:
        assert process.stdin is not None
        process.stdin.write("go\n")
        process.stdin.flush()
    summaries = []
    for process in processes:
        assert process.stdout is not None
        output = process.stdout.read()
        if process.wait() != 0:
            raise RuntimeError(f"a worker failed (exit {process.returncode})")
        summaries.append(json.loads(output.strip().splitlines()[-1]))
    seconds = time.perf_counter() - started
    return RunResult(
        seconds=seconds,
        worker_cpu_seconds=sum(s["cpu_seconds"] for s in summaries),
        calls_run=sum(s["calls_run"] for s in summaries),
    )


def _drop_schema(dsn: str | None, schema: str) -> None:
    import psycopg

    assert dsn is not None
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def machine() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        models = [
            line.split(":", 1)[1].strip()
            for line in cpuinfo.read_text().splitlines()
            if line.startswith("model name")
        ]
        cpu = models[0] if models else cpu
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def _postgres_version(dsn: str) -> str:
    import psycopg

    with psycopg.connect(dsn) as connection:
        row = connection.execute("SHOW server_version").fetchone()
    return str(row[0]) if row else "unknown"


def driver_main(args: argparse.Namespace) -> None:
    workload = Workload(args.sessions, args.rounds, args.calls)
    contenders = [("sqlite", 1, False)]
    contenders += [("postgres", n, False) for n in args.workers]
    contenders += [("postgres", n, True) for n in args.workers if n > 1]
    if not args.dsn:
        raise SystemExit(f"set {DSN_ENV} or pass --dsn to benchmark the PostgreSQL store")
    rows = []
    for store, workers, partitioned in contenders:
        runs = [
            one_run(workload, workers, store, args.dsn, partitioned=partitioned)
            for _ in range(args.runs)
        ]
        for run in runs:
            if run.calls_run != workload.total_calls:
                raise RuntimeError(f"{run.calls_run} calls run, {workload.total_calls} expected")
        seconds = statistics.median(run.seconds for run in runs)
        cpu = statistics.median(run.worker_cpu_seconds for run in runs)
        rows.append(
            {
                "store": store,
                "workers": workers,
                "sessions_per_worker": "share" if partitioned else "all",
                "median_seconds": round(seconds, 3),
                "calls_per_second": round(workload.total_calls / seconds, 1),
                "worker_cpu_ms_per_call": round(1000 * cpu / workload.total_calls, 2),
                "runs": [asdict(run) for run in runs],
            }
        )
        label = f"{store} x{workers}{' partitioned' if partitioned else ''}"
        print(f"{label}: {workload.total_calls / seconds:.1f} calls/s", file=sys.stderr)
    report = {
        "machine": {**machine(), "postgres": _postgres_version(args.dsn)},
        "workload": {**asdict(workload), "total_calls": workload.total_calls},
        "runs_per_contender": args.runs,
        "results": rows,
    }
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(markdown(report))


def markdown(report: dict[str, Any]) -> str:
    m, w = report["machine"], report["workload"]
    lines = [
        f"{w['sessions']} Sessions x {w['rounds']} rounds x {w['calls']} calls = "
        f"{w['total_calls']} no-op calls; median of {report['runs_per_contender']} runs; "
        f"{m['cores']} cores ({m['cpu']}), Python {m['python']}, PostgreSQL {m['postgres']}; "
        "emulator, workers and database share the machine.",
        "",
        "| Store | Workers | Sessions per worker | Calls/s | Seconds | Worker CPU ms/call |",
        "| --- | ---: | --- | ---: | ---: | ---: |",
    ]
    for row in report["results"]:
        lines.append(
            f"| {row['store']} | {row['workers']} | {row['sessions_per_worker']} | "
            f"{row['calls_per_second']} | "
            f"{row['median_seconds']} | {row['worker_cpu_ms_per_call']} |"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    if argv[:1] == ["worker"]:
        worker_main(Path(argv[1]), argv[2], argv[3])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=os.environ.get(DSN_ENV))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=4)
    parser.add_argument("--workers", type=int, nargs="+", default=list(POSTGRES_WORKERS))
    parser.add_argument("--mode", nargs="+", choices=("agent", "split", "all"))
    parser.add_argument("--output", default=str(RESULTS.with_name("fleet_modes.json")))
    args = parser.parse_args(argv)
    if args.mode:
        modes_main(args)
    else:
        driver_main(args)


def _start_workers(
    commands: list[list[str]], env: dict[str, str], *, stdin: int
) -> list[subprocess.Popen[str]]:
    """Start one worker process per command and wait until each says it is ready."""
    processes = [
        subprocess.Popen(command, env=env, stdin=stdin, stdout=subprocess.PIPE, text=True)
        for command in commands
    ]
    for process in processes:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready", "a worker failed to start"
    return processes


if __name__ == "__main__":
    main(sys.argv[1:])
