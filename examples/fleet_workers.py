"""Workers that share an Agent's Sessions: start N, and the Sessions spread over them.

Each worker is a FunctionRunner serving the Agent with ``serve_agent``; they share one
result store (here a SQLite file, so threads or processes of one host; PostgreSQL for
many hosts), which also holds who follows which Session. Sessions created while they
run are found by themselves; ``stop()`` (or SIGTERM in a real worker) hands them over.
In production each worker is a process: ``openagentcore worker app:runner --agent ID``.

    python examples/fleet_workers.py --workers 3 --sessions 6
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from openagentcore import Client, FunctionRunner, SQLiteResultStore, fleet
from openagentcore.local import FunctionCall, LocalCore, Scenario, TurnScript
from openagentcore.runner import current_call


def build_worker(
    client: Client, store: Path, name: str, charges: Counter[str], served_by: dict[str, str]
) -> FunctionRunner:
    runner = FunctionRunner(client, store=SQLiteResultStore(store))

    @runner.function
    def charge(order: str, cents: int) -> str:
        """Charge the customer for an order (not safe to repeat).

        Args:
            order: The order's id.
            cents: The amount.
        """
        call = current_call()
        charges[call.call_id] += 1
        served_by[call.session_id] = name
        return f"charged {cents} cents for {order}"

    return runner


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=6)
    args = parser.parse_args()

    script = Scenario(
        turns=[
            TurnScript(
                steps=[(FunctionCall("charge", {"order": "A-1", "cents": 1250}),)],
                answer="{charge}",
            )
        ]
    )
    charges: Counter[str] = Counter()
    served_by: dict[str, str] = {}
    with (
        LocalCore(scenario=script) as core,
        Client(base_url=core.base_url, api_key=core.api_key) as client,
        tempfile.TemporaryDirectory() as directory,
    ):
        store = Path(directory) / "calls.db"
        workers = [
            build_worker(client, store, f"worker-{n}", charges, served_by)
            for n in range(args.workers)
        ]
        agent = client.agents.create(name="billing", model="scripted", tools=workers[0].tools)
        threads = [
            threading.Thread(
                target=worker.serve_agent,
                args=(agent.id,),
                kwargs={"discovery_interval": 0.2, "heartbeat_interval": 0.2},
            )
            for worker in workers
        ]
        for thread in threads:
            thread.start()
        while len(fleet.status(str(store)).workers) < args.workers:  # all have joined
            time.sleep(0.05)
        print(f"{args.workers} workers serve Agent {agent.id}")

        sessions = [
            client.sessions.create(agent_id=agent.id, input=f"Charge order {n}").id
            for n in range(args.sessions)
        ]
        deadline = time.monotonic() + 60
        while not all(client.sessions.retrieve(s).status == "idle" for s in sessions):
            if time.monotonic() > deadline:
                raise SystemExit("the Sessions did not settle within 60 s")
            time.sleep(0.1)

        for worker in workers:
            worker.stop()  # each hands its Sessions over and serve_agent returns
        for thread in threads:
            thread.join()
        for worker in workers:
            worker.close()

    spread = Counter(served_by.values())
    print(
        f"{len(sessions)} Sessions idle; served by "
        + ", ".join(f"{name}: {count}" for name, count in sorted(spread.items()))
    )
    repeated = [call for call, times in charges.items() if times > 1]
    print(f"{len(charges)} charges, {len(repeated)} repeated")


if __name__ == "__main__":
    main()
