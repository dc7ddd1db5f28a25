"""Many seeds at once: each in its own worker process, as histories share nothing.

A seed's history does not depend on where it runs, so running seeds side by side
changes no result and keeps every replay command exact.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor

from ._fleet import run_fleet_seed
from ._runner import SimRunner
from ._world import Violation, run_seed

__all__ = ["check_seed", "checked", "default_jobs"]

Mutation = Callable[[SimRunner], None]
#: Seeds a worker takes at a time: enough to make sending them cheap, few enough that
#: a search for the first failing seed stops soon after finding it.
_CHUNK = 25
#: Not a plain fork: pytest-xdist runs threads in its workers, and a child forked from a
#: threaded process can deadlock on a lock one of them held.
_START_METHOD = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"


def default_jobs() -> int:
    """One worker per core this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1


def check_seed(seed: int, mutate: Mutation | None = None) -> tuple[int, str | None, bool]:
    """Run one seed: (seed, what went wrong or ``None``, whether it broke a promise
    rather than crashing the simulator). Without ``mutate``, the seed's fleet history
    (:mod:`._fleet`) runs too."""
    logging.disable(logging.CRITICAL)  # the faults make the runner log a lot
    try:
        run_seed(seed, mutate=mutate)
        if mutate is None:
            run_fleet_seed(seed)
    except Violation as exc:
        return seed, str(exc), True
    except Exception as exc:
        return seed, repr(exc), False
    return seed, None, False


def checked(
    seeds: Iterable[int], *, jobs: int, mutate: Mutation | None = None
) -> Iterator[tuple[int, str | None, bool]]:
    """What :func:`check_seed` says of each seed, in seed order, from ``jobs``
    processes. Stop iterating to cancel the seeds not yet started."""
    seeds = list(seeds)
    if jobs <= 1 or len(seeds) <= _CHUNK:
        yield from (check_seed(seed, mutate) for seed in seeds)
        return
    context = multiprocessing.get_context(_START_METHOD)
    with ProcessPoolExecutor(jobs, mp_context=context) as pool:
        outcomes = pool.map(check_seed, seeds, [mutate] * len(seeds), chunksize=_CHUNK)
        try:
            yield from outcomes
        finally:
            pool.shutdown(cancel_futures=True)
