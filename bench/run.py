"""Benchmarks: the FunctionRunner against openai's tool_handlers helper and a raw loop.

    python bench/run.py            # the full run (several minutes)
    python bench/run.py --quick    # smaller sizes, under two minutes
    python bench/run.py --only per_call parallel

Every workload runs in a fresh client process against an emulator in a process of its
own, so CPU and RSS figures are the client's. Prints a markdown table, writes
``bench/results.json`` and, when matplotlib is installed, ``docs/performance.png``.
Medians and p99s, never single times: shared machines are noisy.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from _emulator import Emulator

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results.json"
PLOT = BENCH.parent / "docs" / "performance.png"


@dataclass
class Row:
    """One line of the table: a contender's figure, and its ratio to the reference."""

    benchmark: str
    contender: str
    figure: str
    median: float
    p99: float | None = None
    ratio: float | None = None
    note: str = ""


@dataclass
class Outcome:
    rows: list[Row] = field(default_factory=list)
    goals: list[tuple[str, bool]] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Sizes:
    per_call_rounds: int
    per_call_turns: int
    per_call_steps: int
    parallel_turns: int
    #: (Sessions, calls per Session) of each many-Sessions run.
    many: tuple[tuple[int, int], ...]
    recovery_sessions: int
    recovery_calls: int
    recovery_limit_seconds: float
    soak_checkpoints: tuple[int, int]


FULL = Sizes(
    per_call_rounds=2,
    per_call_turns=5,
    per_call_steps=100,
    parallel_turns=20,
    many=((200, 20), (1_000, 4)),
    recovery_sessions=500,
    recovery_calls=20,
    recovery_limit_seconds=3.0,
    soak_checkpoints=(10_000, 100_000),
)
QUICK = Sizes(
    per_call_rounds=1,
    per_call_turns=2,
    per_call_steps=100,
    parallel_turns=6,
    many=((20, 20),),
    recovery_sessions=50,
    recovery_calls=20,
    recovery_limit_seconds=2.0,
    soak_checkpoints=(1_000, 5_000),
)


def workload(name: str, args: dict[str, Any]) -> dict[str, Any]:
    """Run one workload of ``_workloads.py`` in a fresh process; its JSON answer."""
    done = subprocess.run(
        [sys.executable, str(BENCH / "_workloads.py"), name, json.dumps(args)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"workload {name} {args.get('contender', '')} failed:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


class Capacity:
    """Tracks the emulator's events and CPU across every benchmark."""

    def __init__(self) -> None:
        self.events = 0
        self.cpu_seconds = 0.0
        self.busiest = 0.0  # the highest share of one core the emulator used in a run

    def measure(self, emulator: Emulator, name: str, args: dict[str, Any]) -> dict[str, Any]:
        """Run a workload against ``emulator``, counting what the emulator spent on it."""
        events_before, cpu_before = emulator.stats()
        started = time.perf_counter()
        result = workload(name, args)
        wall = time.perf_counter() - started
        events_after, cpu_after = emulator.stats()
        self.events += events_after - events_before
        self.cpu_seconds += cpu_after - cpu_before
        self.busiest = max(self.busiest, (cpu_after - cpu_before) / wall)
        return result


# -- 1. per-call overhead ------------------------------------------------------------------

PER_CALL = (
    "raw",
    "raw_durable",
    "openai",
    "ours_memory",
    "ours_sqlite",
    "ours_sqlite_idempotent",
    "ours_async_memory",
    "ours_async_sqlite",
)


def per_call(sizes: Sizes, capacity: Capacity) -> Outcome:
    """Server-side time from issuing a ``function_call`` to admitting its result, one
    call per model step, sequential; contenders interleaved round by round."""
    latencies: dict[str, list[float]] = {name: [] for name in PER_CALL}
    #: The client's CPU per call, Turn by Turn; the first Turn of a run pays for imports.
    cpu_per_call: dict[str, list[float]] = {name: [] for name in PER_CALL}
    scenario = {"turns": sizes.per_call_turns, "steps": sizes.per_call_steps, "calls_per_step": 1}
    for round_number in range(sizes.per_call_rounds):
        order = PER_CALL if round_number % 2 == 0 else tuple(reversed(PER_CALL))
        for contender in order:
            with Emulator(scenario) as emulator:
                args = _connect(emulator, contender=contender, turns=sizes.per_call_turns)
                result = capacity.measure(emulator, "turns", args)
                latencies[contender].extend(emulator.latencies())
            cpu_per_call[contender].extend(
                seconds / sizes.per_call_steps for seconds in result["turn_cpu_seconds"][1:]
            )
    outcome = Outcome(raw={"latencies_ms": {}, "cpu_seconds_per_call": cpu_per_call})
    medians = {name: statistics.median(values) * 1000 for name, values in latencies.items()}
    for name, values in latencies.items():
        outcome.raw["latencies_ms"][name] = [round(v * 1000, 4) for v in values]
        outcome.rows.append(
            Row(
                "1. per-call overhead",
                name,
                "issue-to-admit ms",
                medians[name],
                percentile(values, 0.99) * 1000,
                medians[name] / medians["raw"],
                f"n={len(values)}; ratio to raw; "
                f"{medians[name] / medians['raw_durable']:.2f}x raw_durable; client CPU "
                f"{statistics.median(cpu_per_call[name]) * 1000:.2f} ms per call",
            )
        )
    outcome.goals.append(
        ("ours (SQLite) no slower than openai", medians["ours_sqlite"] <= medians["openai"])
    )
    outcome.goals.append(
        ("ours (SQLite) within 1.5x of raw", medians["ours_sqlite"] <= 1.5 * medians["raw"])
    )
    outcome.goals.append(
        (
            "ours (SQLite, idempotent) at most 0.8x openai",
            medians["ours_sqlite_idempotent"] <= 0.8 * medians["openai"],
        )
    )
    return outcome


def _connect(emulator: Emulator, **args: Any) -> dict[str, Any]:
    return {"base_url": emulator.base_url, "api_key": emulator.api_key, **args}


# -- 2. parallel calls ---------------------------------------------------------------------

PARALLEL = ("openai", "ours_sqlite", "ours_memory")


def parallel(sizes: Sizes, capacity: Capacity) -> Outcome:
    """Wall time of Turns that ask for 8 calls at once, each sleeping 50 ms."""
    walls: dict[str, list[float]] = {}
    for contender in PARALLEL:
        with Emulator({"turns": sizes.parallel_turns, "steps": 1, "calls_per_step": 8}) as emulator:
            args = _connect(
                emulator, contender=contender, turns=sizes.parallel_turns, sleep_seconds=0.05
            )
            result = capacity.measure(emulator, "turns", args)
        walls[contender] = result["turn_seconds"][1:]  # the first Turn pays for imports
    outcome = Outcome(raw={"turn_seconds": walls})
    reference = statistics.median(walls["openai"])
    for name, values in walls.items():
        median = statistics.median(values)
        outcome.rows.append(
            Row(
                "2. 8 parallel calls of 50 ms",
                name,
                "ms per Turn",
                median * 1000,
                percentile(values, 0.99) * 1000,
                reference / median,
                "ratio: speed-up over openai",
            )
        )
    speedup = reference / statistics.median(walls["ours_sqlite"])
    outcome.goals.append(("ours (SQLite) >= 5x faster than openai", speedup >= 5))
    return outcome


# -- 3. many Sessions ----------------------------------------------------------------------

MANY = ("openai_threads", "ours_async_sqlite", "ours_async_memory")


def many(sizes: Sizes, capacity: Capacity) -> Outcome:
    """One process serving many Sessions at once: calls per second, peak RSS, and peak
    RSS per Session; once per size in ``sizes.many``."""
    outcome = Outcome()
    for sessions, calls_each in sizes.many:
        _many_once(sessions, calls_each, capacity, outcome)
    return outcome


def _many_once(sessions: int, calls_each: int, capacity: Capacity, outcome: Outcome) -> None:
    results: dict[str, dict[str, Any]] = {}
    scenario = {"turns": 1, "steps": calls_each, "calls_per_step": 1}
    for contender in MANY:
        with Emulator(scenario) as emulator:
            args = _connect(emulator, contender=contender, sessions=sessions)
            results[contender] = capacity.measure(emulator, "many", args)
    outcome.raw[f"{sessions}x{calls_each}"] = results
    calls = sessions * calls_each
    reference = results["openai_threads"]
    benchmark = f"3. {sessions:,} Sessions x {calls_each} calls"
    for name, result in results.items():
        rate = calls / result["seconds"]
        outcome.rows.append(
            Row(
                benchmark,
                name,
                "calls/s",
                rate,
                ratio=rate / (calls / reference["seconds"]),
                note="ratio to openai",
            )
        )
        outcome.rows.append(
            Row(
                benchmark,
                name,
                "peak RSS MB",
                result["peak_rss_mb"],
                ratio=result["peak_rss_mb"] / reference["peak_rss_mb"],
                note=f"ratio to openai; {result['peak_rss_mb'] * 1024 / sessions:.0f} KB per "
                "Session",
            )
        )
    ours = results["ours_async_sqlite"]
    speedup = reference["seconds"] / ours["seconds"]
    wanted = 1.5 if sessions <= 200 else 1.0
    outcome.goals.append(
        (
            f"{sessions:,} Sessions: ours (SQLite) calls/s at least {wanted}x openai's "
            f"({speedup:.2f}x)",
            speedup >= wanted,
        )
    )
    outcome.goals.append(
        (
            f"{sessions:,} Sessions: ours (SQLite) lower peak RSS than openai",
            ours["peak_rss_mb"] < reference["peak_rss_mb"],
        )
    )


# -- 4. recovery ----------------------------------------------------------------------------


def recovery(sizes: Sizes, capacity: Capacity) -> Outcome:
    """Saved but unsubmitted results after a restart: time for a new process to settle
    them all, and how many functions it ran (must be none)."""
    scenario = {
        "turns": 1,
        "steps": 1,
        "calls_per_step": sizes.recovery_calls,
        "ready_turn": False,
    }
    with tempfile.TemporaryDirectory() as directory, Emulator(scenario) as emulator:
        store = str(Path(directory) / "calls.db")
        left = workload(
            "crash_leftovers",
            _connect(emulator, sessions=sizes.recovery_sessions, store=store),
        )
        args = _connect(emulator, store=store, session_ids=left["session_ids"])
        result = capacity.measure(emulator, "recover", args)
    outcome = Outcome(raw={"saved": left["saved"], **result})
    outcome.rows.append(
        Row(
            "4. recovery",
            "ours_async_sqlite",
            f"s to settle {left['saved']} saved results",
            result["seconds"],
            note=f"resubmitted {result['resubmitted']}, functions run {result['runs']}, "
            f"Sessions still waiting {result['waiting']}",
        )
    )
    limit = sizes.recovery_limit_seconds
    outcome.goals.append(
        (f"recovery of {left['saved']:,} under {limit:g} s", result["seconds"] < limit)
    )
    outcome.goals.append(
        (
            "recovery re-ran nothing and settled everything",
            result["runs"] == 0
            and result["waiting"] == 0
            and result["resubmitted"] == left["saved"],
        )
    )
    return outcome


# -- 5. memory --------------------------------------------------------------------------------


def memory(sizes: Sizes, capacity: Capacity) -> Outcome:
    """RSS of one long-running runner process after each checkpoint's number of calls."""
    first, last = sizes.soak_checkpoints
    calls_per_turn = 100
    sessions_turns = 10  # a new Session every 10 Turns, as a server process would see
    scenario = {"turns": sessions_turns, "steps": 10, "calls_per_step": 10}
    with Emulator(scenario) as emulator:
        args = _connect(emulator, checkpoints=[first, last], turns_per_session=sessions_turns)
        result = capacity.measure(emulator, "soak", args)
    rss = result["rss_mb"]
    growth = rss[str(last)] / rss[str(first)] - 1
    outcome = Outcome(raw=result)
    for checkpoint in (first, last):
        outcome.rows.append(
            Row(
                "5. memory",
                "ours_sqlite",
                f"RSS MB after {checkpoint:,} calls",
                rss[str(checkpoint)],
                ratio=rss[str(checkpoint)] / rss[str(first)],
                note=f"{calls_per_turn} calls per Turn; ratio to the first checkpoint; "
                f"{result['threads'][str(checkpoint)]} threads",
            )
        )
    outcome.goals.append((f"RSS growth {first:,} -> {last:,} calls under 5%", growth < 0.05))
    return outcome


BENCHMARKS: dict[str, Callable[[Sizes, Capacity], Outcome]] = {
    "per_call": per_call,
    "parallel": parallel,
    "many": many,
    "recovery": recovery,
    "memory": memory,
}


# -- reporting --------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    model = platform.processor() or "unknown"
    with open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    from importlib.metadata import version

    return {
        "cores": os.cpu_count(),
        "cpu": model,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "openagentcore": version("openagentcore"),
        "openai": version("openai"),
        "httpx": version("httpx"),
    }


def table(rows: Sequence[Row]) -> str:
    lines = [
        "| benchmark | contender | figure | median | p99 | ratio | note |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    for row in rows:
        p99 = f"{row.p99:.2f}" if row.p99 is not None else ""
        ratio = f"{row.ratio:.2f}" if row.ratio is not None else ""
        lines.append(
            f"| {row.benchmark} | {row.contender} | {row.figure} | {row.median:.2f} | "
            f"{p99} | {ratio} | {row.note} |"
        )
    return "\n".join(lines)


def plot(outcomes: dict[str, Outcome], path: Path) -> None:
    try:
        # Imported by name: matplotlib is optional and not a dependency of the project.
        matplotlib: Any = importlib.import_module("matplotlib")
        matplotlib.use("Agg")
        plt: Any = importlib.import_module("matplotlib.pyplot")
    except ImportError:
        print("matplotlib is not installed: skipping the plot (pip install matplotlib)")
        return
    panels = [name for name in ("per_call", "parallel", "many") if name in outcomes]
    if not panels:
        return
    figure, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    for axis, name in zip(axes[0], panels, strict=True):
        rows = [r for r in outcomes[name].rows if r.figure != "peak RSS MB"]
        labels = [r.contender for r in rows]
        medians = [r.median for r in rows]
        errors = [(r.p99 - r.median) if r.p99 is not None else 0 for r in rows]
        axis.bar(labels, medians, yerr=[[0] * len(rows), errors], capsize=4)
        axis.set_title(rows[0].benchmark)
        axis.set_ylabel(rows[0].figure + (" (bar: median, whisker: p99)" if any(errors) else ""))
        axis.tick_params(axis="x", rotation=30)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    print(f"wrote {path}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (< 2 minutes)")
    parser.add_argument("--only", nargs="+", choices=sorted(BENCHMARKS), help="a subset")
    parser.add_argument("--output", type=Path, default=RESULTS, help="the JSON to write")
    parser.add_argument("--plot", type=Path, default=PLOT, help="the PNG to write")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    capacity = Capacity()
    outcomes: dict[str, Outcome] = {}
    started = time.perf_counter()
    for name in args.only or BENCHMARKS:
        print(f"running {name} ...", file=sys.stderr, flush=True)
        outcomes[name] = BENCHMARKS[name](sizes, capacity)
    rows = [row for outcome in outcomes.values() for row in outcome.rows]
    events_per_cpu_second = capacity.events / capacity.cpu_seconds if capacity.cpu_seconds else 0
    rows.append(
        Row(
            "6. emulator capacity",
            "LocalCore",
            "events per CPU second",
            events_per_cpu_second,
            note=f"busiest run used {capacity.busiest:.0%} of one core",
        )
    )
    goals = [goal for outcome in outcomes.values() for goal in outcome.goals]
    print(table(rows))
    print()
    for goal, met in goals:
        print(f"- [{'x' if met else ' '}] {goal}")
    elapsed = time.perf_counter() - started
    print(f"\n{'quick' if args.quick else 'full'} run in {elapsed:.0f} s on {machine()}")
    report = {
        "quick": args.quick,
        "seconds": elapsed,
        "machine": machine(),
        "sizes": asdict(sizes),
        "rows": [asdict(row) for row in rows],
        "goals": [{"goal": goal, "met": met} for goal, met in goals],
        "emulator": {
            "events": capacity.events,
            "cpu_seconds": capacity.cpu_seconds,
            "busiest_core_share": capacity.busiest,
        },
        "raw": {name: outcome.raw for name, outcome in outcomes.items()},
    }
    args.output.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.output}")
    plot(outcomes, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
