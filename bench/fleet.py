"""Throughput of a runner fleet: calls per second for 1, 2, 4 and 8 worker processes on
one PostgreSQL result store, against one worker on SQLite, on the same workload.

    python bench/fleet.py [--dsn postgresql://...] [--runs 3] [--sessions 40]

The emulator runs in its own process (``python -m openagentcore.local``) with a
scenario of ``--rounds`` rounds of ``--calls`` parallel calls to a no-op function in
each Session's first Turn. Every worker process serves every Session with one
``AsyncFunctionRunner`` (defaults otherwise), so workers compete for each call through
the store's claims. Timing starts when every worker has opened its store and is told to
go, and stops when the driver sees every Session idle. Prints a markdown table
(median of ``--runs``) and writes ``bench/fleet_results.json``.

With ``--mode agent cold split [all] --output FILE`` it compares, on PostgreSQL, the
same Sessions (of one saved Agent) served by workers that share them by themselves
(``agent``: a running fleet, its workers joined before the Sessions exist and their
group has formed, and the driver adopts them all at once when the clock starts;
``cold``: the workers start together at the defaults over Sessions created before
them, and find them by listing the Agent's),
by workers given a share each by hand (``split``) and by workers that all serve every
Session (``all``). The modes run interleaved ``--runs`` times (their order reversed on
odd runs). The clock starts when every worker is told to go and stops when the driver
sees every Session idle (it lists them every 50 ms); a worker's CPU and statements are
counted over the same span (for ``split`` and ``all``, until the worker returns), so a
fleet worker's hand-over on SIGTERM afterwards is not. FILE gets ``{"rows": [{"mode", "workers",
"cpu_ms_per_call", "calls_per_s"}, ...]}`` (medians, with min and max, the statements
the workers sent per call and the Sessions they acquired) and, per worker count, each
fleet mode over ``split`` for every pair of runs made back to back.

The PostgreSQL DSN comes from ``--dsn`` or ``OPENAGENTCORE_TEST_POSTGRES_DSN``; each
run uses a fresh schema, dropped afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from openagentcore import AsyncClient, Client
from openagentcore.runner import AsyncFunctionRunner, FunctionRunner
from openagentcore.runner._fleet_directory import PostgresDirectory
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
    """Open the store and the runner, say ``ready``, wait for ``go`` on stdin, serve,
    print a summary (CPU seconds and statements sent from ``go`` on). Setting up (the
    client's TLS context, the store's first connection) comes before ``go`` in every
    mode.

    ``share`` is ``all``, ``I/N`` (serve every N-th Session starting at the I-th),
    ``agent:AGENT_ID`` (``serve_agent`` with the other workers until SIGTERM, joining
    the fleet before ``go`` and finding Sessions only when they are adopted) or
    ``cold:AGENT_ID`` (``serve_agent`` from ``go`` on, at the defaults: the Sessions
    are found by listing the Agent's).
    """
    from _statements import StatementCounter

    counter = StatementCounter()
    session_ids: list[str] = json.loads(sessions_file.read_text())
    mode, _, agent_id = share.partition(":")
    if mode not in ("all", "agent", "cold"):
        index, count = (int(part) for part in share.split("/"))
        session_ids = session_ids[index::count]
    kind, _, where = store_spec.partition(":")
    if kind == "sqlite":
        store: SQLiteResultStore | PostgresResultStore = SQLiteResultStore(where)
    else:
        schema, table = where.split(".")
        store = PostgresResultStore(os.environ[DSN_ENV], schema=schema, table=table)
    marks: list[tuple[float, int, int]] = []

    def mark() -> None:
        marks.append((time.process_time(), counter.store, counter.fleet))

    def go_then_done(go: bool) -> None:
        """A fleet worker's clock: from ``go`` to ``done`` (all Sessions idle), then
        ``noted``; what it does after (handing over on SIGTERM) is not counted."""
        for _ in range(2 if go else 1):
            sys.stdin.readline()
            mark()
        print("noted", flush=True)

    async def work() -> int:
        async with AsyncClient() as client:
            runner = AsyncFunctionRunner(client, store=store)
            register(runner)
            print("ready", flush=True)
            try:
                if mode == "agent":  # joins before go
                    threading.Thread(target=go_then_done, args=(True,), daemon=True).start()
                    hour = 3600.0
                    await runner.serve_agent(agent_id, discovery_interval=hour, sweep_interval=hour)
                    return RUNS[0]
                await asyncio.to_thread(sys.stdin.readline)
                mark()
                if mode == "cold":
                    threading.Thread(target=go_then_done, args=(False,), daemon=True).start()
                    await runner.serve_agent(agent_id)
                    return RUNS[0]
                reports = await asyncio.gather(
                    *(runner.serve(session_id, timeout=600) for session_id in session_ids)
                )
                mark()
            finally:
                await runner.close()
        not_idle = [report.session_id for report in reports if report.final_status != "idle"]
        if not_idle:
            raise SystemExit(f"Sessions not idle at the end: {not_idle}")
        return sum(report.calls_run for report in reports)

    calls_run = asyncio.run(work())
    (cpu_go, store_go, fleet_go), (cpu_end, store_end, fleet_end) = marks
    summary = {
        "calls_run": calls_run,
        "cpu_seconds": cpu_end - cpu_go,
        "store_statements": store_end - store_go,
        "fleet_statements": fleet_end - fleet_go,
    }
    print(json.dumps(summary), flush=True)


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
    #: Statements the workers sent from ``go`` on: the result store's, the fleet's.
    store_statements: int = 0
    fleet_statements: int = 0
    #: Times a worker took a Session, until all were idle (the fleet modes; each Session
    #: once at best).
    acquired: int = 0


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


def one_run(workload: Workload, workers: int, store: str, dsn: str | None, mode: str) -> RunResult:
    """Fresh emulator, store and Sessions of one saved Agent; ``workers`` processes
    are told to go at once, and the clock stops when the driver sees every Session idle
    (see the module's docstring for the modes)."""
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        scenario_file = workdir / "scenario.json"
        scenario_file.write_text(json.dumps(workload.scenario()))
        emulator = Emulator(scenario_file)
        schema = f"oac_bench_{secrets.token_hex(4)}"
        env = {**os.environ, **emulator.env}
        client = Client(
            api_key=env["OPENAGENTCORE_API_KEY"], base_url=env["OPENAGENTCORE_BASE_URL"]
        )
        processes: list[subprocess.Popen[str]] = []
        try:
            if store == "postgres":
                assert dsn is not None
                env[DSN_ENV] = dsn
                spec = f"postgres:{schema}.calls"
            else:
                spec = f"sqlite:{workdir / 'calls.db'}"
            agent = client.agents.create(name="bench", model="scripted", tools=tools())

            def create_sessions() -> list[str]:
                return [
                    client.sessions.create(agent_id=agent.id, input=f"job {n}").id
                    for n in range(workload.sessions)
                ]

            session_ids = [] if mode == "agent" else create_sessions()
            sessions_file = workdir / "sessions.json"
            sessions_file.write_text(json.dumps(session_ids))
            shares = {
                "all": ["all"] * workers,
                "split": [f"{index}/{workers}" for index in range(workers)],
                "agent": [f"agent:{agent.id}"] * workers,
                "cold": [f"cold:{agent.id}"] * workers,
            }[mode]
            command = [sys.executable, __file__, "worker", str(sessions_file), spec]
            processes = _start_workers(
                [[*command, share] for share in shares], env, stdin=subprocess.PIPE
            )
            if mode == "agent":
                assert dsn is not None
                directory = PostgresDirectory(dsn, schema=schema, table="calls")
                while len(directory.status().workers) < workers:
                    time.sleep(0.05)
                session_ids = create_sessions()  # not listed by the workers for an hour
                _wait_until_formed(dsn, schema)
            started = time.perf_counter()
            for process in processes:
                assert process.stdin is not None
                process.stdin.write("go\n")
                process.stdin.flush()
            if mode == "agent":
                directory.adopt([(session_id, agent.id) for session_id in session_ids])
                directory.close()
            _wait_until_idle(client, agent.id, len(session_ids))
            seconds = time.perf_counter() - started
            acquired = 0
            if mode in ("agent", "cold"):
                assert dsn is not None
                with contextlib.closing(PostgresDirectory(dsn, schema=schema, table="calls")) as d:
                    acquired = sum(epoch for *_, epoch in d.status().sessions)
                for process in processes:
                    assert process.stdin is not None
                    process.stdin.write("done\n")
                    process.stdin.flush()
                for process in processes:
                    assert process.stdout is not None
                    assert process.stdout.readline().strip() == "noted"
                    process.send_signal(signal.SIGTERM)
            summaries = []
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
                store_statements=sum(s["store_statements"] for s in summaries),
                fleet_statements=sum(s["fleet_statements"] for s in summaries),
                acquired=acquired,
            )
        finally:
            for process in processes:
                if process.poll() is None:
                    process.kill()
                    process.wait()
            client.close()
            emulator.stop()
            if store == "postgres":
                _drop_schema(dsn, schema)


def _wait_until_formed(dsn: str, schema: str) -> None:
    """Until the fleet's group has formed (its first worker joined a heartbeat interval
    ago, the default 1 s): a running fleet, which takes its whole share of an adopt."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as connection:
        while True:
            row = connection.execute(
                "SELECT extract(epoch from clock_timestamp()) - min(joined) "
                f'FROM "{schema}"."calls_fleet_workers"'
            ).fetchone()
            if row is not None and row[0] is not None and row[0] >= 1.0:
                return
            time.sleep(0.05)


def _wait_until_idle(client: Client, agent_id: str, sessions: int) -> None:
    """One listing per 50 ms, so the driver loads the emulator alike in every mode."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        time.sleep(0.05)
        listed = client.sessions.list(agent_id=agent_id, limit=100)
        if sum(1 for session in listed if session.status == "idle") == sessions:
            return
    raise RuntimeError("the Sessions were not idle within 600 s")


def _spread(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
    }


def modes_main(args: argparse.Namespace) -> None:
    """``--mode``: the rows the fleet's numbers are checked against. The modes run
    interleaved (run r: every worker count, the modes in turn, their order reversed on
    odd runs), so a busy spell of a shared host falls on all of them, and each
    agent/split ratio compares two runs made back to back."""
    if not args.dsn:
        raise SystemExit(f"set {DSN_ENV} or pass --dsn to benchmark the modes on PostgreSQL")
    workload = Workload(args.sessions, args.rounds, args.calls)
    runs: dict[tuple[str, int], list[RunResult]] = {}
    for run in range(args.runs):
        for workers in args.workers:
            for mode in args.mode if run % 2 == 0 else args.mode[::-1]:
                result = one_run(workload, workers, "postgres", args.dsn, mode)
                if result.calls_run != workload.total_calls:
                    raise RuntimeError(
                        f"{mode} x{workers}: {result.calls_run} calls run, "
                        f"{workload.total_calls} expected"
                    )
                runs.setdefault((mode, workers), []).append(result)
                print(
                    f"run {run + 1}/{args.runs} {mode} x{workers}: "
                    f"{workload.total_calls / result.seconds:.1f} calls/s, "
                    f"{1000 * result.worker_cpu_seconds / workload.total_calls:.2f} ms CPU/call, "
                    f"{result.acquired} acquired",
                    file=sys.stderr,
                )
    total = workload.total_calls
    rows = []
    for (mode, workers), results in runs.items():
        calls_per_s = _spread([total / r.seconds for r in results])
        cpu = _spread([1000 * r.worker_cpu_seconds / total for r in results])
        rows.append(
            {
                "mode": mode,
                "workers": workers,
                "cpu_ms_per_call": cpu["median"],
                "calls_per_s": calls_per_s["median"],
                "cpu_ms_per_call_spread": cpu,
                "calls_per_s_spread": calls_per_s,
                "store_statements_per_call": _spread([r.store_statements / total for r in results]),
                "fleet_statements_per_call": _spread([r.fleet_statements / total for r in results]),
                "acquired": _spread([r.acquired for r in results]),
                "runs": [asdict(r) for r in results],
            }
        )
    document = {
        "machine": {**machine(), "postgres": _postgres_version(args.dsn)},
        "workload": {**asdict(workload), "total_calls": total},
        "runs_per_row": args.runs,
        "rows": rows,
        "fleet_vs_split": _ratios(runs, args.workers, total),
    }
    Path(args.output).write_text(json.dumps(document, indent=2) + "\n")
    print(modes_markdown(document))


def _ratios(
    runs: dict[tuple[str, int], list[RunResult]], workers: list[int], total: int
) -> list[dict[str, Any]]:
    """Per fleet mode and worker count, fleet over split for each pair of runs made
    back to back."""
    ratios = []
    for mode in ("agent", "cold"):
        for count in workers:
            fleet, split = runs.get((mode, count)), runs.get(("split", count))
            if not fleet or not split:
                continue
            pairs = list(zip(fleet, split, strict=True))
            cpu = _spread([f.worker_cpu_seconds / s.worker_cpu_seconds for f, s in pairs])
            speed = _spread([s.seconds / f.seconds for f, s in pairs])
            extra = _spread([(f.store_statements - s.store_statements) / total for f, s in pairs])
            ratios.append(
                {
                    "mode": mode,
                    "workers": count,
                    "cpu_ratio": cpu,
                    "calls_per_s_ratio": speed,
                    "extra_store_statements_per_call": extra,
                    "goal_met": cpu["median"] <= 1.1 and speed["median"] >= 0.9,
                }
            )
    return ratios


def modes_markdown(document: dict[str, Any]) -> str:
    m, w = document["machine"], document["workload"]
    lines = [
        f"{w['sessions']} Sessions x {w['rounds']} rounds x {w['calls']} calls = "
        f"{w['total_calls']} no-op calls; {document['runs_per_row']} interleaved runs per "
        f"row, median [min-max]; {m['cores']} cores ({m['cpu']}), PostgreSQL {m['postgres']}.",
        "",
        "| mode | workers | calls/s | CPU ms/call | store statements/call "
        "| fleet statements/call | Sessions acquired |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]

    def cell(spread: dict[str, float], digits: int) -> str:
        return (
            f"{spread['median']:.{digits}f} [{spread['min']:.{digits}f}-{spread['max']:.{digits}f}]"
        )

    for row in sorted(document["rows"], key=lambda r: (r["workers"], r["mode"])):
        lines.append(
            f"| {row['mode']} | {row['workers']} | {cell(row['calls_per_s_spread'], 0)} | "
            f"{cell(row['cpu_ms_per_call_spread'], 2)} | "
            f"{cell(row['store_statements_per_call'], 2)} | "
            f"{cell(row['fleet_statements_per_call'], 3)} | "
            f"{cell(row['acquired'], 0)} |"
        )
    if document["fleet_vs_split"]:
        lines += [
            "",
            "| mode | workers | CPU per call / split's | calls/s / split's "
            "| extra store statements/call | goal met |",
            "| --- | ---: | ---: | ---: | ---: | --- |",
        ]
        for ratio in document["fleet_vs_split"]:
            lines.append(
                f"| {ratio['mode']} | {ratio['workers']} | {cell(ratio['cpu_ratio'], 2)} | "
                f"{cell(ratio['calls_per_s_ratio'], 2)} | "
                f"{cell(ratio['extra_store_statements_per_call'], 2)} | "
                f"{'yes' if ratio['goal_met'] else 'no'} |"
            )
    return "\n".join(lines)


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
            one_run(workload, workers, store, args.dsn, "split" if partitioned else "all")
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
    parser.add_argument("--mode", nargs="+", choices=("agent", "cold", "split", "all"))
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
