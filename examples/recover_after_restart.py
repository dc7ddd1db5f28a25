"""Settle a Session after the process serving it crashed.

    python examples/recover_after_restart.py                       # self-contained demo
    python examples/recover_after_restart.py SESSION_ID --store calls.db   # your Session

The demo starts the local emulator, lets a worker process run a payment function and
kills it (SIGKILL) right after the charge went through but before its result was saved.
A new runner on the same store then recovers the Session: the call is *in doubt*, so it
is not charged again; the model gets a failed result saying the outcome is unknown.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from openagentcore import Client, FunctionRunner, SQLiteResultStore

CHARGES = "charges.log"


def build_runner(client: Client, store: Path, ledger: Path, *, crash: bool) -> FunctionRunner:
    runner = FunctionRunner(client, store=SQLiteResultStore(store))

    @runner.function
    def charge_card(order_id: str, cents: int) -> str:
        """Charge the customer's card for an order.

        Args:
            order_id: The order to charge.
            cents: The amount in cents.
        """
        with ledger.open("a") as file:
            file.write(f"{order_id} {cents}\n")
        if crash:
            os.kill(os.getpid(), signal.SIGKILL)  # the process dies mid-call
        return f"charged {cents} cents for {order_id}"

    return runner


def worker(base_url: str, api_key: str, session_id: str, store: Path, ledger: Path) -> None:
    """The process that crashes: serves the Session until its charge kills it."""
    with Client(base_url=base_url, api_key=api_key) as client:
        build_runner(client, store, ledger, crash=True).serve(session_id, timeout=30)


def recover(client: Client, session_id: str, store: Path, ledger: Path) -> None:
    runner = build_runner(client, store, ledger, crash=False)
    report = runner.recover(session_id)
    print(
        f"Recovered {session_id}: {report.results_resubmitted} saved results resubmitted, "
        f"{len(report.in_doubt)} in doubt, {report.calls_run} calls run"
    )
    for key in report.in_doubt:
        record = runner.store.get(key)
        assert record is not None
        print(
            f"  in doubt: {record.function_name} (call {key.call_id}), attempts {record.attempts}"
        )
    final = runner.serve(session_id, timeout=30)
    print(f"Session is {final.final_status}")
    runner.close()


def demo() -> None:
    from openagentcore.local import FunctionCall, LocalCore, Scenario, TurnScript

    script = Scenario(
        turns=(
            TurnScript(
                steps=((FunctionCall("charge_card", {"order_id": "A-17", "cents": 4200}),),),
                answer="Payment step finished: {charge_card}",
            ),
        )
    )
    with tempfile.TemporaryDirectory() as tmp, LocalCore(scenario=script) as core:
        store, ledger = Path(tmp) / "calls.db", Path(tmp) / CHARGES
        with Client(base_url=core.base_url, api_key=core.api_key) as client:
            session = client.sessions.create(
                agent={
                    "model": "scripted",
                    "tools": build_runner(client, store, ledger, crash=False).tools,
                },
                input="Charge order A-17.",
            )
            print(f"Session {session.id}: starting a worker that will crash mid-call")
            args = [core.base_url, core.api_key, session.id, str(store), str(ledger)]
            code = subprocess.call([sys.executable, __file__, "--worker", *args])
            print(f"Worker exited with {code} (killed: {code == -signal.SIGKILL})")
            recover(client, session.id, store, ledger)
            charges = ledger.read_text().splitlines()
            print(f"Card charged {len(charges)} time(s): {charges}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("session_id", nargs="?", help="a Session to settle (default: demo)")
    parser.add_argument("--store", type=Path, default=Path("calls.db"), help="the result store")
    parser.add_argument("--ledger", type=Path, default=Path(CHARGES), help="where charges go")
    parser.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        base_url, api_key, session_id, store, ledger = args.worker
        worker(base_url, api_key, session_id, Path(store), Path(ledger))
    elif args.session_id:
        with Client() as client:
            recover(client, args.session_id, args.store, args.ledger)
    else:
        demo()


if __name__ == "__main__":
    main()
