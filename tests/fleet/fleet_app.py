"""The application ``openagentcore worker fleet_app:runner`` imports in the fleet
process tests: an AsyncFunctionRunner on the test's PostgreSQL schema (or SQLite file),
with ``charge`` (not safe to repeat), which logs each run to ``FLEET_EFFECTS`` in one
``O_APPEND`` write before it returns.

Configured by the environment (never the command line): ``OPENAGENTCORE_BASE_URL``,
``OPENAGENTCORE_API_KEY``, ``FLEET_EFFECTS``, and ``FLEET_POSTGRES_SCHEMA`` with
``OPENAGENTCORE_TEST_POSTGRES_DSN``, or ``FLEET_SQLITE``. With ``FLEET_SIGTERM_AT``
the worker signals itself once, where a supervisor's SIGTERM may land in a real start:
``import`` (the application still importing) or ``open`` (``serve_agent`` opening its
directory, before its loop's first round).
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

from openagentcore import AsyncClient
from openagentcore.runner import AsyncFunctionRunner, _fleet, current_call
from openagentcore.runner._fleet_directory import Directory
from openagentcore.store import PostgresResultStore, ResultStore, SQLiteResultStore

#: How long each function works after its effect, so kills land inside calls.
WORK_SECONDS = 0.15


def _store() -> ResultStore:
    if "FLEET_SQLITE" in os.environ:
        return SQLiteResultStore(os.environ["FLEET_SQLITE"])
    return PostgresResultStore(
        os.environ["OPENAGENTCORE_TEST_POSTGRES_DSN"],
        schema=os.environ["FLEET_POSTGRES_SCHEMA"],
        pool_size=2,
    )


runner = AsyncFunctionRunner(AsyncClient(), store=_store(), poll_interval=0.2)


def _sigterm_at(where: str | None) -> None:
    if where == "import":
        os.kill(os.getpid(), signal.SIGTERM)
    elif where == "open":
        opening = _fleet.open_directory

        def open_then_signal(*args: Any, **kwargs: Any) -> Directory:
            os.kill(os.getpid(), signal.SIGTERM)
            return opening(*args, **kwargs)

        _fleet.open_directory = open_then_signal  # type: ignore[assignment]


_sigterm_at(os.environ.get("FLEET_SIGTERM_AT"))


@runner.function
def charge(order: str) -> str:
    """Charge the customer for an order."""
    call = current_call()
    line = {"session": call.session_id, "call": call.call_id, "pid": os.getpid(), "at": time.time()}
    descriptor = os.open(os.environ["FLEET_EFFECTS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(descriptor, (json.dumps(line) + "\n").encode())
    finally:
        os.close(descriptor)
    time.sleep(WORK_SECONDS)
    return f"charged {order}"
