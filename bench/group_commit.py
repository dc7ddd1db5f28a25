"""Store throughput when many threads write at once: what group commit buys.

    python bench/group_commit.py sqlite 16 100
    OPENAGENTCORE_TEST_POSTGRES_DSN=postgresql://... python bench/group_commit.py postgres 16 100

THREADS threads start together; each claims and saves CALLS calls of its own, one
after the other, as a runner's function threads do. Prints the changes (claims and
saves) committed per second and how many changes a commit carried on average. The
PostgreSQL run works in a schema of its own, dropped at the end.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import tempfile
import threading
import time
from pathlib import Path

from openagentcore.store import CallKey, PostgresResultStore, SQLiteResultStore


def main(kind: str, threads: int, calls: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as directory:
        store: SQLiteResultStore | PostgresResultStore
        if kind == "sqlite":
            store = SQLiteResultStore(Path(directory) / "calls.db")
        else:
            store = PostgresResultStore(
                os.environ["OPENAGENTCORE_TEST_POSTGRES_DSN"],
                schema="bench_group_commit",
                table=f"calls_{secrets.token_hex(4)}",
            )
        start = threading.Barrier(threads)

        def write(thread: int) -> None:
            start.wait()
            for number in range(calls):
                key = CallKey("sess_bench", f"turn_{thread}", f"call_{number}")
                store.claim(key, function_name="f", arguments_hash="h", owner="o", lease_seconds=60)
                store.save_result(key, {"output": number}, owner="o")

        workers = [threading.Thread(target=write, args=(t,)) for t in range(threads)]
        started = time.perf_counter()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        seconds = time.perf_counter() - started
        group = store._group
        store.close()
        if isinstance(store, PostgresResultStore):
            import psycopg

            with psycopg.connect(os.environ["OPENAGENTCORE_TEST_POSTGRES_DSN"]) as connection:
                connection.execute('DROP SCHEMA "bench_group_commit" CASCADE')
    return {
        "store": kind,
        "changes_per_second": round(2 * threads * calls / seconds),
        "seconds": round(seconds, 2),
        "changes_per_commit": round(group.changes / group.commits, 2),
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))))
