"""Several processes and first-time openers sharing one SQLite file or PostgreSQL table."""

from __future__ import annotations

import multiprocessing
import queue
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest

from openagentcore.store import CallKey, ResultStore, SQLiteResultStore
from openagentcore.store._sql import MIGRATIONS

from ._support import StoreSpec, applied_schema_versions, claim_race_worker, keys

PROCESSES = 4
KEYS = 60
# Workers come from a fork server: they start fast, and unlike a plain fork they do not
# copy this process's threads' locks (pytest-xdist runs threads in its workers, and a
# child forked from a threaded process can deadlock). Each opens its own connections,
# so the race is between processes exactly as in production.
START_METHOD = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"


def test_processes_racing_to_claim_produce_exactly_one_winner_per_key(
    durable_spec: StoreSpec,
) -> None:
    durable_spec.open().close()  # create the schema so the race is about claims only
    context = multiprocessing.get_context(START_METHOD)
    barrier = context.Barrier(PROCESSES)
    results = context.Queue()
    workers = [
        context.Process(
            target=claim_race_worker,
            args=(durable_spec, f"racer:{index}:p", KEYS, barrier, results),
        )
        for index in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    try:
        reports = [results.get(timeout=60) for _ in workers]
    finally:
        for worker in workers:
            worker.join(timeout=30)
    assert [worker.exitcode for worker in workers] == [0] * PROCESSES

    winners = {call_id: owner for owner, _pid, won in reports for call_id in won}
    wins = Counter(call_id for _owner, _pid, won in reports for call_id in won)
    assert wins == Counter(key.call_id for key in keys(KEYS))
    assert len({pid for _owner, pid, _won in reports}) == PROCESSES

    with durable_spec.open() as store:
        for key in keys(KEYS):
            record = store.get(key)
            assert record is not None
            assert record.owner == winners[key.call_id]


def test_first_opens_racing_create_the_schema_once(durable_spec: StoreSpec) -> None:
    openers = 6
    barrier = threading.Barrier(openers)
    opened: queue.Queue[ResultStore | BaseException] = queue.Queue()

    def open_store() -> None:
        barrier.wait(timeout=30)
        try:
            opened.put(durable_spec.open())
        except BaseException as exc:
            opened.put(exc)

    threads = [threading.Thread(target=open_store) for _ in range(openers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    stores = [opened.get_nowait() for _ in range(openers)]
    errors = [store for store in stores if isinstance(store, BaseException)]
    assert not errors, errors
    for store in stores:
        assert not isinstance(store, BaseException)
        assert store.find() == []
        store.close()
    # SQLite keeps only the latest version; PostgreSQL records each one applied.
    latest = MIGRATIONS[-1].version
    expected = [latest] if durable_spec.kind == "sqlite" else list(range(1, latest + 1))
    assert applied_schema_versions(durable_spec) == expected


CRASHING_RUNNER = """
import sys, time
from openagentcore.store import CallKey, SQLiteResultStore, new_owner_id
store = SQLiteResultStore(sys.argv[1])
owner = new_owner_id()
for name in ("running", "finished"):
    store.claim(CallKey("s", "t", name), function_name="f", arguments_hash="h",
                owner=owner, lease_seconds=3600)
store.save_result(CallKey("s", "t", "finished"), {"type": "x", "output": "done"}, owner=owner)
print(owner, flush=True)
time.sleep(60)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="needs SIGKILL and pid probing")
def test_a_killed_runner_leaves_its_work_recoverable(tmp_path: Path) -> None:
    path = tmp_path / "calls.db"
    runner = subprocess.Popen(
        [sys.executable, "-c", CRASHING_RUNNER, str(path)], stdout=subprocess.PIPE, text=True
    )
    assert runner.stdout is not None
    owner = runner.stdout.readline().strip()
    runner.send_signal(signal.SIGKILL)
    runner.wait(timeout=30)

    with SQLiteResultStore(path) as store:
        running = store.get(CallKey("s", "t", "running"))
        finished = store.get(CallKey("s", "t", "finished"))
        assert running is not None
        assert finished is not None
        assert finished.result == {"type": "x", "output": "done"}
        assert running.owner == owner
        assert store.is_stale(running)  # long lease, but its process is gone
        assert store.take_over(
            running.key, owner="successor:1:a", lease_seconds=60, expected_attempts=1
        ).won
