"""One worker of a runner fleet, for the fleet tests: kill it at will, start another.

Run as ``python fleet_worker.py SESSIONS_JSON EFFECTS_LOG (--sqlite PATH | --postgres
SCHEMA.TABLE)`` with ``OPENAGENTCORE_BASE_URL`` and ``OPENAGENTCORE_API_KEY`` (and, for
PostgreSQL, ``OPENAGENTCORE_TEST_POSTGRES_DSN``) in the environment, never on the
command line, so keys stay out of ``ps``.

It serves every Session listed in ``SESSIONS_JSON`` at once with one
:class:`AsyncFunctionRunner` until each is idle. Every run of a function appends one JSON
line ``{"session", "call", "function", "pid"}`` to ``EFFECTS_LOG`` before it returns:
one ``write`` on an ``O_APPEND`` descriptor, so lines from concurrent processes never
interleave and a SIGKILL after the write cannot take the effect back.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from openagentcore import AsyncClient, Client
from openagentcore.runner import AsyncFunctionRunner, FunctionRunner, current_call
from openagentcore.runner._base import RunnerBase
from openagentcore.store import (
    MemoryResultStore,
    PostgresResultStore,
    ResultStore,
    SQLiteResultStore,
)

POSTGRES_DSN_ENV = "OPENAGENTCORE_TEST_POSTGRES_DSN"
#: How long each function works after its effect, so kills land inside calls.
WORK_SECONDS = 0.15
#: Re-read a Session waiting on other workers' calls this often (default 1 s), so a
#: dead worker's calls are noticed quickly in a short test.
POLL_INTERVAL = 0.2


def open_worker_store(sqlite: Path | None, postgres: str | None) -> ResultStore:
    if sqlite is not None:
        return SQLiteResultStore(sqlite)
    assert postgres is not None
    schema, table = postgres.split(".")
    return PostgresResultStore(
        os.environ[POSTGRES_DSN_ENV], schema=schema, table=table, pool_size=2
    )


def register(runner: RunnerBase, effects: Path) -> None:
    """``charge`` (not safe to repeat) and ``reserve`` (idempotent)."""

    def effect(function: str, order: str) -> str:
        call = current_call()  # effects are counted per call
        line = {"session": call.session_id, "call": call.call_id, "function": function}
        data = (json.dumps({**line, "pid": os.getpid(), "at": time.time()}) + "\n").encode()
        descriptor = os.open(effects, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(descriptor, data)
        finally:
            os.close(descriptor)
        time.sleep(WORK_SECONDS)
        return f"{function}d {order}"

    @runner.function
    def charge(order: str) -> str:
        """Charge the customer for an order."""
        return effect("charge", order)

    @runner.function(idempotent=True)
    def reserve(order: str) -> str:
        """Reserve stock for an order."""
        return effect("reserve", order)


def tools() -> list[dict[str, Any]]:
    """The declarations the test puts on the Sessions the workers serve."""
    client = Client(api_key="unused", base_url="http://127.0.0.1:9/v1")
    with client, FunctionRunner(client, store=MemoryResultStore()) as runner:
        register(runner, Path(os.devnull))
        return runner.tools


async def serve(session_ids: list[str], store: ResultStore, effects: Path) -> dict[str, Any]:
    async with AsyncClient() as client:
        runner = AsyncFunctionRunner(
            client, store=store, max_concurrency=16, poll_interval=POLL_INTERVAL
        )
        try:
            register(runner, effects)
            reports = await asyncio.gather(
                # No timeout: the test waits for this exit, however loaded the machine,
                # and kills the workers itself when its own timeout ends it.
                *(runner.serve(session_id) for session_id in session_ids)
            )
        finally:
            await runner.close()
    return {
        "pid": os.getpid(),
        "calls_run": sum(report.calls_run for report in reports),
        "in_doubt": sum(len(report.in_doubt) for report in reports),
        "store_errors": sum(report.store_errors for report in reports),
        "not_idle": [r.session_id for r in reports if r.final_status != "idle"],
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("sessions", type=Path)
    parser.add_argument("effects", type=Path)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--sqlite", type=Path)
    where.add_argument("--postgres", metavar="SCHEMA.TABLE")
    args = parser.parse_args(argv)
    session_ids: list[str] = json.loads(args.sessions.read_text())
    store = open_worker_store(args.sqlite, args.postgres)
    summary = asyncio.run(serve(session_ids, store, args.effects))
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
