"""Charge a card exactly once, even when the worker is killed mid-charge.

    python examples/payments_bot.py

The ``charge`` function has an effect that must not happen twice, yet it is declared
``idempotent=True``: it hands the call's ``ctx.idempotency_key`` to the payment service,
which deduplicates charges by that key. So when the worker dies after the charge went
through but before its result was saved, a restarted worker may simply run the call
again: the service answers with the charge it already made, and the model gets a real
result instead of "outcome unknown".

The demo starts the local emulator (no API key, no network beyond loopback) and a fake
payment service on loopback that keeps its charges in a file. The service kills the
first worker with SIGKILL as soon as it has recorded the charge, before it answers.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from openagentcore import CallContext, Client, FunctionRunner, SQLiteResultStore
from openagentcore.types import FunctionCallOutputItem, MessageItem


class PaymentService(ThreadingHTTPServer):
    """A payment provider that makes at most one charge per ``Idempotency-Key``, kept in
    a JSON file so that it survives its clients' crashes.

    ``victim`` is a process to SIGKILL right after the first charge is recorded and
    before it is answered: the worst moment for the client.
    """

    def __init__(self, ledger: Path) -> None:
        super().__init__(("127.0.0.1", 0), _PaymentHandler)
        self.ledger = ledger
        self.lock = threading.Lock()
        self.victim: int | None = None
        self.requests = 0

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def charges(self) -> dict[str, dict[str, Any]]:
        if not self.ledger.exists():
            return {}
        charges: dict[str, dict[str, Any]] = json.loads(self.ledger.read_text())
        return charges

    def charge(self, key: str, order_id: str, cents: int) -> tuple[dict[str, Any], bool]:
        """The charge for ``key``, made now or earlier; ``True`` when it is a replay."""
        with self.lock:
            self.requests += 1
            charges = self.charges()
            if key in charges:
                return charges[key], True
            charge = {"id": f"ch_{len(charges) + 1}", "order_id": order_id, "cents": cents}
            charges[key] = charge
            temporary = self.ledger.with_suffix(".tmp")
            temporary.write_text(json.dumps(charges))
            os.replace(temporary, self.ledger)  # durable before anyone hears of it
            return charge, False


class _PaymentHandler(BaseHTTPRequestHandler):
    server: PaymentService

    def do_POST(self) -> None:
        key = self.headers.get("Idempotency-Key")
        if not key:
            self.send_error(400, "Idempotency-Key header required")
            return
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        charge, replayed = self.server.charge(key, body["order_id"], body["cents"])
        print(
            f"  [payments] {'replayed' if replayed else 'charged'} {charge['id']}: "
            f"{charge['cents']} cents for {charge['order_id']}",
            flush=True,
        )
        if self.server.victim is not None:
            victim, self.server.victim = self.server.victim, None
            print(f"  [payments] killing worker {victim} before it hears back", flush=True)
            os.kill(victim, signal.SIGKILL)
            return  # the dead worker never gets an answer
        payload = json.dumps({**charge, "replayed": replayed}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the handler prints its own story."""


def build_runner(client: Client, store: Path, payments_url: str) -> FunctionRunner:
    runner = FunctionRunner(client, store=SQLiteResultStore(store))

    # Safe to run again: the payment service makes one charge per idempotency key.
    @runner.function(idempotent=True, timeout=30)
    def charge(order_id: str, cents: int, ctx: CallContext) -> str:
        """Charge the customer's card for an order.

        Args:
            order_id: The order to charge.
            cents: The amount in cents.
        """
        print(f"  [worker {os.getpid()}] charge attempt {ctx.attempt}", flush=True)
        response = httpx.post(
            f"{payments_url}/charges",
            json={"order_id": order_id, "cents": cents},
            headers={"Idempotency-Key": ctx.idempotency_key},
            timeout=ctx.time_remaining(),
        )
        response.raise_for_status()
        receipt = response.json()
        return f"charged {receipt['cents']} cents for {receipt['order_id']} ({receipt['id']})"

    return runner


def worker(base_url: str, api_key: str, session_id: str, store: Path, payments_url: str) -> None:
    """One worker process: serves the Session until it is idle (or until it is killed)."""
    logging.basicConfig(format=f"  [worker {os.getpid()}] %(message)s", stream=sys.stdout)
    with Client(base_url=base_url, api_key=api_key) as client:
        runner = build_runner(client, store, payments_url)
        report = runner.serve(session_id, timeout=60)
        print(
            f"  [worker {os.getpid()}] done: {report.calls_run} call(s) run, "
            f"{len(report.in_doubt)} found in doubt and re-run, Session {report.final_status}",
            flush=True,
        )
        runner.close()


def demo() -> None:
    from openagentcore.local import FunctionCall, LocalCore, Scenario, TurnScript

    script = Scenario(
        turns=(
            TurnScript(
                steps=((FunctionCall("charge", {"order_id": "A-17", "cents": 4200}),),),
                answer="Payment done: {charge}",
            ),
        )
    )
    with tempfile.TemporaryDirectory() as tmp, LocalCore(scenario=script) as core:
        store, ledger = Path(tmp) / "calls.db", Path(tmp) / "charges.json"
        payments = PaymentService(ledger)
        threading.Thread(target=payments.serve_forever, daemon=True).start()
        try:
            with Client(base_url=core.base_url, api_key=core.api_key) as client:
                tools = build_runner(client, store, payments.url).tools
                session = client.sessions.create(
                    agent={"model": "scripted", "tools": tools}, input="Charge order A-17."
                )
                print(f"Session {session.id}: the model asks to charge order A-17")

                def start_worker() -> subprocess.Popen[bytes]:
                    args = [core.base_url, core.api_key, session.id, str(store), payments.url]
                    return subprocess.Popen([sys.executable, __file__, "--worker", *args])

                first = start_worker()
                payments.victim = first.pid
                code = first.wait(timeout=60)
                print(f"Worker 1 exited with {code} (killed by SIGKILL: {code == -signal.SIGKILL})")

                print("Restarting the worker on the same result store")
                second = start_worker()
                second.wait(timeout=60)

                items = list(client.sessions.items.list(session.id, order="asc"))
                for item in items:
                    if isinstance(item, FunctionCallOutputItem):
                        print(f"Call answered ({item.status}): {item.output or item.error}")
                    elif isinstance(item, MessageItem) and item.role == "assistant":
                        print(f"Agent: {item.output_text}")
                charges = list(payments.charges().values())
                print(
                    f"Payment service: {payments.requests} charge request(s), "
                    f"{len(charges)} charge(s) made: {charges}"
                )
        finally:
            payments.shutdown()
            payments.server_close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        base_url, api_key, session_id, store, payments_url = args.worker
        worker(base_url, api_key, session_id, Path(store), payments_url)
    else:
        demo()


if __name__ == "__main__":
    main()
