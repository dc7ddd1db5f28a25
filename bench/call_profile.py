"""Where the client's time goes on one call's path: the runner against the bare loop.

    python bench/call_profile.py [--turns 6] [--steps 100] [--contenders ours_memory raw]

Each contender runs ``run.py``'s per-call workload (sequential calls, one per model
step) in a process of its own against the emulator in another, sampled by py-spy
(``pip install py-spy``: a measurement tool, not a dependency; a sampling profiler
barely slows the code it watches, unlike a tracing one). Only busy samples count
(threads waiting on a socket or a lock are left out), imports are left out, and each
sample is charged to the part of the path its innermost frame belongs to: reading the
stream and parsing events, the runner's core, its driver, the store, HTTP, hand-offs
between threads. The table prints each part's busy time per call, so the runner's cost
over the bare loop can be read part by part.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from _emulator import Emulator  # noqa: E402

#: Parts of a call's path, by the file of the innermost frame: the first match wins.
PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "runner core (decisions)",
        (
            "openagentcore/runner/_c",
            "openagentcore/runner/_serves",
            "openagentcore/runner/_housekeeping",
            "openagentcore/runner/_phases",
            "openagentcore/runner/_effects",
        ),
    ),
    ("runner driver (pump, threads, hooks)", ("openagentcore/runner/",)),
    ("result store", ("openagentcore/store/", "sqlite3/")),
    ("event types (pydantic)", ("openagentcore/types/", "pydantic")),
    ("client (requests, SSE)", ("openagentcore/", "httpx_sse/")),
    (
        "HTTP (httpx, httpcore, h11, ssl, sockets)",
        ("httpx/", "httpcore/", "h11/", "ssl.py", "socket.py", "selectors.py", "anyio/"),
    ),
    ("threads, queues, asyncio", ("threading.py", "queue.py", "concurrent/", "asyncio/")),
    ("json", ("json/",)),
    ("logging", ("logging/",)),
    ("the benchmark's own code", ("_workloads.py",)),
)
OTHER = "other (stdlib)"


def part_of(frame: str) -> str:
    where = frame[frame.rfind("(") + 1 :]
    for name, markers in PARTS:
        if any(marker in where for marker in markers):
            return name
    return OTHER


def profile(contender: str, turns: int, steps: int, rate: int) -> tuple[dict[str, int], int]:
    """Busy samples by part, and the calls the run made."""
    scenario = {"turns": turns, "steps": steps, "calls_per_step": 1}
    with Emulator(scenario) as emulator, tempfile.TemporaryDirectory() as directory:
        args = {
            "base_url": emulator.base_url,
            "api_key": emulator.api_key,
            "contender": contender,
            "turns": turns,
        }
        samples_file = Path(directory) / "samples.txt"
        done = subprocess.run(
            [
                "py-spy",
                "record",
                "--format",
                "raw",
                "--rate",
                str(rate),
                "--nonblocking",
                "--gil",
                "-o",
                str(samples_file),
                "--",
                sys.executable,
                str(BENCH / "_workloads.py"),
                "turns",
                json.dumps(args),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        # py-spy adds its own lines; the workload's answer is the JSON one.
        answer = next(line for line in done.stdout.splitlines() if line.startswith("{"))
        result = json.loads(answer)
        samples: dict[str, int] = defaultdict(int)
        for line in samples_file.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or "importlib._bootstrap" in stack:
                continue
            samples[part_of(stack.rsplit(";", 1)[-1])] += int(count)
    return dict(samples), int(result["runs"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--rate", type=int, default=1000, help="samples per second")
    parser.add_argument("--contenders", nargs="+", default=["ours_memory", "raw"])
    args = parser.parse_args()
    if shutil.which("py-spy") is None:
        sys.exit("call_profile.py samples with py-spy: pip install py-spy")
    results = {name: profile(name, args.turns, args.steps, args.rate) for name in args.contenders}

    def per_call(name: str, part: str) -> float:
        samples, calls = results[name]
        return samples.get(part, 0) / args.rate / calls * 1000

    parts = sorted(
        {part for samples, _ in results.values() for part in samples},
        key=lambda part: -max(per_call(name, part) for name in results),
    )
    print("| part of the path | " + " | ".join(f"{name} ms/call" for name in results) + " |")
    print("| --- |" + " --- |" * len(results))
    for part in parts:
        print(f"| {part} | " + " | ".join(f"{per_call(n, part):.3f}" for n in results) + " |")
    totals = [sum(per_call(name, part) for part in parts) for name in results]
    print("| all busy time | " + " | ".join(f"**{total:.3f}**" for total in totals) + " |")
    print("\n" + ", ".join(f"{name}: {calls} calls" for name, (_, calls) in results.items()))


if __name__ == "__main__":
    main()
