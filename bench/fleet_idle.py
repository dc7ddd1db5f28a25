"""Statements per second of an idle fleet: ``python bench/fleet_idle.py [--seconds 30]``.

Eight ``serve_agent`` workers (in this process, default knobs) share an Agent with no
Session to serve, over 10,000 parked Sessions in the directory on the PostgreSQL of
``OPENAGENTCORE_TEST_POSTGRES_DSN`` (a schema of its own, dropped at the end). After
10 s of settling, every statement the process sends is counted for ``--seconds``.
Issue 25 asks for at most 10 statements/s in all.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import time

import psycopg
from _statements import StatementCounter

from openagentcore import AsyncClient, Client
from openagentcore.local import LocalCore
from openagentcore.runner import AsyncFunctionRunner
from openagentcore.runner._fleet_directory import PostgresDirectory
from openagentcore.store import PostgresResultStore

WORKERS = 8
PARKED = 10_000
SETTLE = 10.0


async def measure(dsn: str, seconds: float) -> float:
    counted = StatementCounter()
    schema = f"oac_idle_{secrets.token_hex(4)}"
    try:
        with LocalCore() as core, Client(api_key=core.api_key, base_url=core.base_url) as sync:
            agent = sync.agents.create(name="idle", model="scripted")
            PostgresDirectory(dsn, schema=schema).close()  # creates the tables
            with psycopg.connect(dsn, autocommit=True) as connection:
                connection.execute(
                    f'INSERT INTO "{schema}"."openagentcore_calls_fleet_sessions" '
                    "SELECT 'default', 'sess_parked_' || n, %s, 'parked', NULL, 1, 0 "
                    "FROM generate_series(1, %s) AS n",
                    (agent.id, PARKED),
                )
            runners = [
                AsyncFunctionRunner(
                    AsyncClient(api_key=core.api_key, base_url=core.base_url),
                    store=PostgresResultStore(dsn, schema=schema, pool_size=1),
                )
                for _ in range(WORKERS)
            ]
            serving = [asyncio.create_task(runner.serve_agent(agent.id)) for runner in runners]
            await asyncio.sleep(SETTLE)
            before, began = counted.total, time.monotonic()
            await asyncio.sleep(seconds)
            rate = (counted.total - before) / (time.monotonic() - began)
            for runner in runners:
                runner.stop()
            await asyncio.gather(*serving)
            for runner in runners:
                await runner.close()
                await runner.client.close()
    finally:
        with psycopg.connect(dsn, autocommit=True) as connection:
            connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    dsn = os.environ["OPENAGENTCORE_TEST_POSTGRES_DSN"]
    rate = asyncio.run(measure(dsn, args.seconds))
    print(f"{WORKERS} idle workers over {PARKED} parked Sessions: {rate:.1f} statements/s")


if __name__ == "__main__":
    main()
