"""Soak the runner in the simulator: ``python -m tests.sim --seeds 10000``.

Every failing seed is printed with a one-line command that replays exactly its history.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from typing import TextIO

from ._fleet import run_fleet_seed
from ._soak import checked, default_jobs
from ._world import run_seed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.sim", description=__doc__)
    parser.add_argument("--seeds", type=int, default=2000, help="how many seeds to run")
    parser.add_argument("--start", type=int, default=0, help="the first seed")
    parser.add_argument("--seed", type=int, default=None, help="replay one seed, verbosely")
    parser.add_argument(
        "--seed-list",
        type=argparse.FileType("r"),
        default=None,
        help="run the seeds this file lists (whitespace-separated, # starts a comment) "
        "instead of --start/--seeds",
    )
    parser.add_argument(
        "--fail-fast", action="store_true", help="stop at the first failing seed (with --jobs 1)"
    )
    parser.add_argument(
        "--jobs", type=int, default=default_jobs(), help="worker processes (default: one per core)"
    )
    args = parser.parse_args(argv)
    began = time.perf_counter()
    if args.seed is not None:
        outcomes = [_replay(args.seed)]
    else:
        seeds = (
            _read_seed_list(args.seed_list)
            if args.seed_list is not None
            else list(range(args.start, args.start + args.seeds))
        )
        outcomes = []
        for outcome in checked(seeds, jobs=args.jobs):
            outcomes.append(outcome)
            if args.fail_fast and outcome[1] is not None:
                break
    failures = 0
    for seed, error, _ in outcomes:
        if error is not None:
            failures += 1
            print(f"seed {seed} FAILED: {error}")
            print(f"  replay: python -m tests.sim --seed {seed}")
    elapsed = time.perf_counter() - began
    count = len(outcomes)
    jobs = 1 if args.seed is not None else args.jobs
    print(
        f"{count - failures} passed, {failures} failed "
        f"({count} seeds in {elapsed:.1f} s, {jobs} process{'es' if jobs > 1 else ''})"
    )
    return 1 if failures else 0


def _read_seed_list(file: TextIO) -> list[int]:
    """The seeds a file lists: a fixed set, e.g. the ones that pass on a known-good build."""
    with file:
        return [int(word) for line in file for word in line.partition("#")[0].split()]


def _replay(seed: int) -> tuple[int, str | None, bool]:
    """One seed in this process, with the runner's log and the whole traceback."""
    try:
        run_seed(seed)
        run_fleet_seed(seed)
    except Exception as exc:
        traceback.print_exc()
        return seed, str(exc), True
    return seed, None, False


if __name__ == "__main__":
    sys.exit(main())
