"""Soak the runner in the simulator: ``python -m tests.sim --seeds 10000``.

Every failing seed is printed with a one-line command that replays exactly its history.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
import traceback

from ._world import run_seed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.sim", description=__doc__)
    parser.add_argument("--seeds", type=int, default=2000, help="how many seeds to run")
    parser.add_argument("--start", type=int, default=0, help="the first seed")
    parser.add_argument("--seed", type=int, default=None, help="replay one seed, verbosely")
    args = parser.parse_args(argv)
    seeds = [args.seed] if args.seed is not None else range(args.start, args.start + args.seeds)
    if args.seed is None:
        # A soak's faults make the runner log thousands of lines; a replay shows them.
        logging.disable(logging.CRITICAL)
    failures = 0
    began = time.perf_counter()
    for seed in seeds:
        try:
            run_seed(seed)
        except Exception as exc:
            failures += 1
            print(f"seed {seed} FAILED: {exc}")
            if args.seed is not None:
                traceback.print_exc()
            print(f"  replay: python -m tests.sim --seed {seed}")
    elapsed = time.perf_counter() - began
    count = len(seeds)
    print(f"{count - failures} passed, {failures} failed ({count} seeds in {elapsed:.1f} s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
