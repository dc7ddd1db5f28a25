"""What one thread hand-off costs on this machine: the wait from handing a job to an
idle pool thread until that thread starts it.

    python bench/handoff.py                # 2,000 hand-offs in each condition
    python bench/handoff.py --count 5000

The sync runner hands each call from the stream's reader to a function's thread (so
calls of one step run at once); openai's helper runs everything on one thread. How
much that hand-off costs depends on whether a core is free when it happens, so it is
measured four ways: with nothing else running; with the handing thread going on with
0.1 ms of Python work (as the reader goes on parsing the events that follow a call);
with every other core kept busy by a child process each (as the emulator keeps one
busy while it sends a call); and with both. Prints the median and p99 in microseconds.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import multiprocessing.synchronize
import os
import statistics
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

#: Pure-Python work standing in for parsing the events that follow a call.
_FOLLOW_ON_WORK = 0.0001


def _spin(stop: multiprocessing.synchronize.Event) -> None:
    while not stop.is_set():
        sum(range(1000))


@contextmanager
def _other_cores_busy() -> Iterator[None]:
    stop = multiprocessing.Event()
    spinners = [
        multiprocessing.Process(target=_spin, args=(stop,), daemon=True)
        for _ in range(max(1, (os.cpu_count() or 2) - 1))
    ]
    for spinner in spinners:
        spinner.start()
    time.sleep(0.2)
    try:
        yield
    finally:
        stop.set()
        for spinner in spinners:
            spinner.join()


def _busy_for(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _handoffs(count: int, *, follow_on: bool) -> list[float]:
    """Seconds from ``submit`` to the job starting, ``count`` times, one at a time."""
    waits: list[float] = []
    started = threading.Event()
    pool = ThreadPoolExecutor(1)

    def job(submitted: float) -> None:
        waits.append(time.perf_counter() - submitted)
        started.set()

    pool.submit(lambda: None).result()  # the thread exists and waits for work
    for _ in range(count):
        started.clear()
        pool.submit(job, time.perf_counter())
        if follow_on:
            _busy_for(_FOLLOW_ON_WORK)
        started.wait()
        time.sleep(0.001)  # the pool thread goes back to waiting, as between calls
    pool.shutdown()
    return waits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=2000)
    count = parser.parse_args().count
    print(f"{os.cpu_count()} cores; {count} hand-offs each; microseconds")
    print("| condition | median | p99 |")
    print("|---|---:|---:|")
    for label, busy, follow_on in (
        ("idle machine", False, False),
        ("handing thread goes on working", False, True),
        ("other cores busy", True, False),
        ("both", True, True),
    ):
        with _other_cores_busy() if busy else contextlib.nullcontext():
            waits = sorted(_handoffs(count, follow_on=follow_on))
        median = statistics.median(waits) * 1e6
        p99 = waits[int(0.99 * (len(waits) - 1))] * 1e6
        print(f"| {label} | {median:.0f} | {p99:.0f} |")


if __name__ == "__main__":
    main()
