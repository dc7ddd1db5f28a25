"""Soak and chaos: SIGKILL a FunctionRunner at random instants while every fault is on.

    python bench/chaos.py                      # 50 kills over 1,000 calls
    python bench/chaos.py --kills 10 --sessions 4 --seed 7

Each call's function appends one line to a ledger file (its effect) before returning.
Worker processes serve the Sessions through a shared SQLite store and are killed again
and again; a last one is left to finish. Then the ledger, the store and the server's
Items are compared. Exits non-zero when any safety count is not 0 ("in doubt" is the
one count allowed: a call killed between starting and saving its result is reported to
the model as failed with an unknown outcome, never run twice).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from _emulator import Emulator

from openagentcore import Client, FunctionRunner, MemoryResultStore, SQLiteResultStore
from openagentcore.types import FunctionCallItem, FunctionCallOutputItem

#: Every fault the emulator has, on at once.
FAULTS: dict[str, Any] = {
    "close_stream_after": 7,
    "duplicate_every": 3,
    "reject_input_every": 5,
    "lose_input_response_every": 7,
    "retry_after": 0,
    "pending_call_delay": 0.02,
}
STEPS = 10
SERVE_TIMEOUT = 60.0


@dataclass
class ChaosReport:
    kills: int
    calls: int
    effects_run_more_than_once: int
    calls_lost: int
    success_without_effect: int
    resubmitted_results_differing: int
    in_doubt: int
    conflicts_409: int

    def safe(self) -> bool:
        """Everything but ``in_doubt`` must be 0."""
        return not (
            self.effects_run_more_than_once
            or self.calls_lost
            or self.success_without_effect
            or self.resubmitted_results_differing
            or self.conflicts_409
        )


def _parameters(tag: str | None) -> dict[str, Any]:
    session: dict[str, Any] = {"type": "string"}
    if tag is not None:
        session["const"] = tag  # the scripted model fills arguments from the schema
    return {
        "type": "object",
        "properties": {"session": session},
        "required": ["session"],
        "additionalProperties": False,
    }


def _tools(count: int, tag: str | None) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "name": f"work_{index}",
            "description": "Records one effect in the ledger.",
            "parameters": _parameters(tag),
        }
        for index in range(count)
    ]


# -- the worker process ------------------------------------------------------------------


def worker(
    base_url: str,
    api_key: str,
    store: str | None,
    ledger: str,
    sessions: list[str],
    calls: int,
    effect_seconds: float,
    hold: bool = False,
) -> None:
    """Serve every Session until all are settled; killed at random by the driver.

    ``store=None`` runs without a durable store, to show what the audit catches then.
    ``hold``: each call says "effect" on stdout once its effect is in the ledger, then
    waits for the kill instead of returning.
    """
    with Client(base_url=base_url, api_key=api_key) as client:
        result_store = SQLiteResultStore(store) if store else MemoryResultStore()
        runner = FunctionRunner(client, store=result_store)
        for index in range(calls):
            runner.function(
                name=f"work_{index}",
                description="Records one effect in the ledger.",
                parameters=_parameters(None),
            )(_effect(f"work_{index}", ledger, effect_seconds, hold))
        print("serving", flush=True)  # the driver's clock for the kill starts now
        for session_id in sessions:
            runner.serve(session_id, timeout=SERVE_TIMEOUT)
        runner.close()


def _effect(name: str, ledger: str, seconds: float, hold: bool) -> Any:
    def effect(session: str) -> str:
        line = f"{name} {session}\n".encode()
        descriptor = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(descriptor, line)  # one O_APPEND write: a line is whole or absent
        finally:
            os.close(descriptor)
        if hold:
            print("effect", flush=True)
            threading.Event().wait()  # until the driver's SIGKILL
        time.sleep(seconds)  # the rest of the work: a kill here leaves the call in doubt
        return f"{name} ran for {session}"

    return effect


# -- the driver -----------------------------------------------------------------------------


def run(
    *,
    kills: int,
    sessions: int,
    calls_per_step: int,
    seed: int,
    effect_seconds: float = 0.01,
    max_life: float = 0.3,
    durable: bool = True,
    kill_after_effect: bool = False,
) -> ChaosReport:
    """Kill ``kills`` workers at random instants, let one finish, and audit the outcome.

    Each worker is killed a random time between 0 and ``max_life`` seconds after it
    starts serving (imports and setup are not counted); with ``kill_after_effect``,
    once one of its calls has had its effect and before any such call returns, however
    slow the machine is."""
    chooser = random.Random(seed)
    calls = STEPS * calls_per_step
    scenario = {
        "turns": 1,
        "steps": STEPS,
        "calls_per_step": calls_per_step,
        "ready_turn": False,
        "distinct_functions": True,
    }
    with tempfile.TemporaryDirectory() as directory, Emulator(scenario, FAULTS) as emulator:
        store, ledger = str(Path(directory) / "calls.db"), str(Path(directory) / "ledger")
        with Client(base_url=emulator.base_url, api_key=emulator.api_key) as client:
            session_ids = [
                client.sessions.create(
                    agent={"model": "scripted", "tools": _tools(calls, f"s{n}")},
                    input="Do the work.",
                ).id
                for n in range(sessions)
            ]
        arguments = [
            emulator.base_url,
            emulator.api_key,
            store if durable else None,
            ledger,
            session_ids,
            calls,
            effect_seconds,
        ]
        script = [sys.executable, str(Path(__file__).resolve()), "--worker"]
        command = [*script, json.dumps(arguments)]
        killed = [*script, json.dumps([*arguments, kill_after_effect])]
        done_kills = 0
        while done_kills < kills:
            process = subprocess.Popen(
                killed, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
            )
            assert process.stdout is not None
            process.stdout.readline()  # "serving", or "" if it exited first
            if kill_after_effect:
                process.stdout.readline()  # "effect", or "" if it exited first
            try:
                process.wait(timeout=0.0 if kill_after_effect else chooser.uniform(0.0, max_life))
            except subprocess.TimeoutExpired:
                process.send_signal(signal.SIGKILL)
                process.wait()
                done_kills += 1
                continue
            finally:
                process.stdout.close()
            break  # it finished everything before the next kill
        final = subprocess.run(command, check=False, timeout=600, capture_output=True, text=True)
        if final.returncode != 0:
            raise RuntimeError(f"the last worker failed ({final.returncode}):\n{final.stderr}")
        report = _audit(emulator, store, ledger, session_ids, done_kills)
    return report


def _audit(
    emulator: Emulator, store_path: str, ledger: str, session_ids: list[str], kills: int
) -> ChaosReport:
    effects = collections.Counter(Path(ledger).read_text().splitlines())
    issued = 0
    lost = 0
    success_without_effect = 0
    differing = 0
    in_doubt = 0
    store = SQLiteResultStore(store_path)
    with Client(base_url=emulator.base_url, api_key=emulator.api_key) as client:
        for number, session_id in enumerate(session_ids):
            items = list(client.sessions.items.list(session_id, order="asc"))
            names = {i.call_id: i.name for i in items if isinstance(i, FunctionCallItem)}
            outputs = {i.call_id: i for i in items if isinstance(i, FunctionCallOutputItem)}
            saved_results = {
                record.key.call_id: record.result
                for record in store.find(session_id=session_id)
                if record.result is not None
            }
            issued += len(names)
            for call_id, name in names.items():
                output = outputs.get(call_id)
                if output is None:
                    lost += 1
                    continue
                if output.status == "completed":
                    if effects[f"{name} s{number}"] == 0:
                        success_without_effect += 1
                else:
                    in_doubt += 1
                saved = saved_results.get(call_id)
                if saved is not None:
                    applied = output.model_dump(mode="json", include={"output", "error"})
                    kept = {"output": saved.get("output"), "error": saved.get("error")}
                    if applied != kept:
                        differing += 1
    store.close()
    return ChaosReport(
        kills=kills,
        calls=issued,
        effects_run_more_than_once=sum(1 for count in effects.values() if count > 1),
        calls_lost=lost,
        success_without_effect=success_without_effect,
        resubmitted_results_differing=differing,
        in_doubt=in_doubt,
        conflicts_409=emulator.conflicts(),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=50, help="SIGKILLs before the last run")
    parser.add_argument("--sessions", type=int, default=20, help="Sessions to serve")
    parser.add_argument("--calls-per-step", type=int, default=5, help=f"x {STEPS} steps")
    parser.add_argument("--seed", type=int, default=None, help="kill timing seed")
    parser.add_argument(
        "--effect-seconds", type=float, default=0.01, help="time each call takes after its effect"
    )
    parser.add_argument(
        "--max-life", type=float, default=0.3, help="longest a worker serves before its kill"
    )
    parser.add_argument(
        "--no-store",
        action="store_true",
        help="workers keep results in memory only: shows what the audit catches",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(*json.loads(args.worker))
        return 0
    seed = args.seed if args.seed is not None else int(time.time())
    started = time.perf_counter()
    report = run(
        kills=args.kills,
        sessions=args.sessions,
        calls_per_step=args.calls_per_step,
        seed=seed,
        effect_seconds=args.effect_seconds,
        max_life=args.max_life,
        durable=not args.no_store,
    )
    for name, value in asdict(report).items():
        print(f"{name.replace('_', ' '):32} {value}")
    print(f"{'seed':32} {seed}")
    print(f"{'seconds':32} {time.perf_counter() - started:.1f}")
    return 0 if report.safe() else 1


if __name__ == "__main__":
    sys.exit(main())
