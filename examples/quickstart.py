"""A support bot whose functions are served by a FunctionRunner.

Runs against the local emulator it starts itself (no API key, no network), or against a
real server when OPENAGENTCORE_BASE_URL and OPENAGENTCORE_API_KEY are set. The result
store is calls.db in the current directory, kept after the run, so you can look at it:

    python examples/quickstart.py
    openagentcore calls list --store calls.db
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator
from enum import Enum
from pathlib import Path

from pydantic import BaseModel

from openagentcore import Client, FunctionRunner, SQLiteResultStore
from openagentcore.types import MessageItem


class Priority(str, Enum):
    low = "low"
    high = "high"


class Ticket(BaseModel):
    id: str
    subject: str
    priority: Priority
    open: bool


TICKETS = {
    "T-1": Ticket(id="T-1", subject="Cannot log in", priority=Priority.high, open=True),
}


def build_runner(client: Client, store_path: Path) -> FunctionRunner:
    runner = FunctionRunner(client, store=SQLiteResultStore(store_path))

    @runner.function
    def lookup_ticket(ticket_id: str) -> Ticket:
        """Look up a support ticket.

        Args:
            ticket_id: The ticket's id, such as T-1.
        """
        return TICKETS.get(ticket_id) or Ticket(
            id=ticket_id, subject="(unknown ticket)", priority=Priority.low, open=False
        )

    @runner.function(name="search_docs", idempotent=True)
    def search(query: str, limit: int = 3) -> list[str]:
        """Search the product documentation; safe to repeat.

        Args:
            query: Words to look for.
            limit: How many hits to return.
        """
        return [f"docs/{query.replace(' ', '-')}-{n}.md" for n in range(1, limit + 1)]

    @runner.function
    def escalate(ticket_id: str, priority: Priority) -> str:
        """Escalate a ticket to the on-call engineer.

        Args:
            ticket_id: The ticket to escalate.
            priority: The new priority.
        """
        print(f"  [effect] escalated {ticket_id} to {priority.value}")
        return f"{ticket_id} escalated to {priority.value}"

    return runner


@contextlib.contextmanager
def server() -> Iterator[tuple[str | None, str | None]]:
    """The server to use: the environment's, or a local emulator started here."""
    if os.environ.get("OPENAGENTCORE_BASE_URL"):
        yield None, None
        return
    from openagentcore.local import FunctionCall, LocalCore, Scenario, TurnScript

    # The emulator's scripted model stands in for a real one: what it calls, in order.
    script = Scenario(
        turns=(
            TurnScript(
                steps=(
                    (
                        FunctionCall("lookup_ticket", {"ticket_id": "T-1"}),
                        FunctionCall("search_docs", {"query": "login problems"}),
                    ),
                    (FunctionCall("escalate", {"ticket_id": "T-1", "priority": "high"}),),
                ),
                answer="Ticket: {lookup_ticket}. Docs: {search_docs}. {escalate}.",
            ),
            TurnScript(answer="I looked up T-1, found docs and escalated it."),
        )
    )
    with LocalCore(scenario=script) as core:
        print(f"Local emulator at {core.base_url}")
        yield core.base_url, core.api_key


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--store",
        type=Path,
        default=Path("calls.db"),
        help="SQLite result store, kept after the run (default: calls.db here)",
    )
    parser.add_argument("--model", default="scripted", help="model for the Agent")
    args = parser.parse_args()

    with server() as (base_url, api_key), Client(base_url=base_url, api_key=api_key) as client:
        runner = build_runner(client, args.store)
        print(f"Serving {len(runner.tools)} functions; results saved in {args.store}")

        session = client.sessions.create(
            agent={"model": args.model, "tools": runner.tools},
            input="Ticket T-1 cannot log in. Find help and escalate it.",
        )
        print(f"Session {session.id} created ({session.status})")
        report = runner.serve(session.id, timeout=60)
        print(f"First Turn settled: {report.calls_run} calls run, status {report.final_status}")
        for item in client.sessions.items.list(session.id, order="asc"):
            if isinstance(item, MessageItem) and item.role == "assistant":
                print(f"Agent: {item.output_text}")

        result = runner.run_turn(session.id, "Summarise what you did.", timeout=60)
        print(f"Second Turn {result.status}: {result.report.calls_run} calls run")
        print(f"Answer: {result.text}")
        runner.close()
    print(f"Next: openagentcore calls list --store {args.store}")


if __name__ == "__main__":
    main()
