"""A runner process that tests kill with SIGKILL at chosen instants, then restart.

Run as ``python crash_worker.py SESSION_ID WORKDIR [--kill WINDOW:FUNCTION]
[--kill-after SECONDS] [--runner sync|async]``, with ``OPENAGENTCORE_BASE_URL`` and
``OPENAGENTCORE_API_KEY`` in the environment (never on the command line).

It serves the Session with a :class:`SQLiteResultStore` in ``WORKDIR/calls.db``. Every
run of a function appends ``<function> <order>`` to ``WORKDIR/effects.log`` (flushed and
fsynced) before it returns, so the test can count effects after any crash.

Kill windows, each at the first call of ``FUNCTION`` that reaches it:

- ``claim``: before the call is claimed in the store (nothing recorded yet);
- ``effect``: inside the function, right after its effect, once its claim is durable
  (an idempotent function starts as its claim is sent: the kill waits for the claim);
- ``unclaimed``: inside the function, right after its effect, while its claim is held
  back from the store (an idempotent function's run that no record shows);
- ``saved``: right after its result is saved (completed, not yet posted);
- ``submitted``: right after the server accepted its result (202), before the runner
  writes that down (progress marks are written in batches) and before any later call
  is claimed: the server sends the next call as soon as it accepts a result, and its
  claim could otherwise land before the runner hears the 202, leaving that call in
  doubt too. Once the victim's result is saved, later claims wait for the kill.
- ``unsaved``: right after the server accepted its result (202) while its save is held
  back from the store (an idempotent function's result is posted as it is saved).

- ``shared``: inside the first commit shared by several changes, after its statements
  ran and before its ``COMMIT`` (the first commit is held until two changes wait, so
  the next one is shared); ``shared_committed``: right after that ``COMMIT``, before
  any of its callers hears of it. ``FUNCTION`` is ``any`` for these two.

Before killing itself it writes what it hit to ``WORKDIR/victim.json``. ``--kill-after``
kills at a random instant instead. A run that ends normally prints its ServeReport as
JSON on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from openagentcore import AsyncClient, Client
from openagentcore.runner import AsyncFunctionRunner, FunctionRunner, ServeReport
from openagentcore.runner._base import RunnerBase
from openagentcore.runner._effects import PostOutcome
from openagentcore.store import (
    CallKey,
    CallRecord,
    Claim,
    MemoryResultStore,
    ResultStore,
    SQLiteResultStore,
)
from openagentcore.store._group import PendingWrite
from openagentcore.store._sql import Transaction

WINDOWS = (
    "claim",
    "effect",
    "unclaimed",
    "saved",
    "submitted",
    "unsaved",
    "shared",
    "shared_committed",
)
#: Windows inside the store's group commit, whatever the function.
SHARED_WINDOWS = ("shared", "shared_committed")
#: How long each function works after its effect, so random kills land inside calls.
WORK_SECONDS = 0.02
#: A guard on waiting for a claim to be durable: far longer than any commit takes.
WAIT_SECONDS = 30.0


class Killer:
    """Kills this process the first time ``window`` is reached by ``function``."""

    def __init__(self, workdir: Path, window: str | None, function: str | None) -> None:
        self.workdir = workdir
        self.window = window
        self.function = function
        #: Set when the ``submitted`` victim's result is saved: from then on, claims
        #: wait for the kill, so the kill point does not depend on thread timing.
        self.victim_saved = threading.Event()
        #: Set once the victim's claim is durable (the ``effect`` window waits for it).
        self.victim_claimed = threading.Event()

    @property
    def fast_path(self) -> bool:
        """The windows only the idempotent fast path opens run with it on."""
        return self.window in ("unclaimed", "unsaved")

    def targets(self, window: str, function: str) -> bool:
        return window == self.window and function == self.function

    def reached(self, window: str, function: str, **victim: str) -> None:
        if window == "effect" and self.targets(window, function):
            self.victim_claimed.wait(WAIT_SECONDS)
        if self.targets(window, function):
            record = {"window": window, "function": function, **victim}
            (self.workdir / "victim.json").write_text(json.dumps(record))
            os.kill(os.getpid(), signal.SIGKILL)
        if window == "saved" and self.window == "submitted" and function == self.function:
            self.victim_saved.set()

    def before_claim(self, function: str, **victim: str) -> None:
        self.reached("claim", function, **victim)
        if self.victim_saved.is_set() or self.targets("unclaimed", function):
            # Never set back: this store thread sleeps until the victim's 202 kills
            # the process (or the test's timeout ends the worker, if it never comes).
            threading.Event().wait()


def kill_in_shared_commit(store: SQLiteResultStore, killer: Killer, window: str) -> None:
    """Hold the store's first commit until two more changes wait for it, then kill the
    process inside the shared commit that follows (``shared``) or right after it
    (``shared_committed``), naming the calls whose changes it carried."""
    group = store._group
    real_commit, real_enqueue = group._commit, group._enqueue
    company = threading.Event()
    first_done = threading.Event()
    waiting: list[PendingWrite[Any]] = []

    def enqueue(pending: PendingWrite[Any]) -> None:
        real_enqueue(pending)
        waiting.append(pending)
        if len(waiting) >= 2:
            company.set()

    def strike(batch: list[PendingWrite[Any]]) -> None:
        calls = [pending.order[2] for pending in batch if pending.order is not None]
        killer.reached(window, "any", call_ids=",".join(calls))

    @contextlib.contextmanager
    def dying() -> Iterator[Transaction]:
        with SQLiteResultStore._transaction(store) as tx:
            yield tx
            strike(dying_batch)

    dying_batch: list[PendingWrite[Any]] = []

    def commit(batch: list[PendingWrite[Any]]) -> None:
        if not first_done.is_set():
            first_done.set()
            # No clock: on a loaded machine the other claims come when they come, and
            # the test's WORKER_TIMEOUT ends a worker whose company never does.
            company.wait()
            real_commit(batch)
        elif len(batch) < 2:
            real_commit(batch)
        elif window == "shared":
            dying_batch.extend(batch)
            store._transaction = dying  # type: ignore[method-assign]
            real_commit(batch)
        else:
            real_commit(batch)
            strike(batch)

    group._commit = commit  # type: ignore[method-assign]
    group._enqueue = enqueue  # type: ignore[method-assign]


class KillingStore:
    """A store that hands every call to ``inner`` and lets the killer strike around it."""

    def __init__(self, inner: ResultStore, killer: Killer) -> None:
        self.inner = inner
        self.killer = killer

    def claim(
        self,
        key: CallKey,
        *,
        function_name: str,
        arguments_hash: str,
        owner: str,
        lease_seconds: float,
    ) -> Claim:
        self.killer.before_claim(function_name, call_id=key.call_id)
        claim = self.inner.claim(
            key,
            function_name=function_name,
            arguments_hash=arguments_hash,
            owner=owner,
            lease_seconds=lease_seconds,
        )
        if function_name == self.killer.function:
            self.killer.victim_claimed.set()
        return claim

    def save_result(
        self, key: CallKey, result: Mapping[str, Any], *, owner: str | None
    ) -> CallRecord:
        held = self.inner.get(key)
        if held is not None and self.killer.targets("unsaved", held.function_name):
            self.killer.victim_saved.set()  # later claims wait for the kill, as for submitted
            threading.Event().wait()  # never saved: the 202 kills the process first
        record = self.inner.save_result(key, result, owner=owner)
        self.killer.reached("saved", record.function_name, call_id=key.call_id)
        return record

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def register(runner: RunnerBase, effects: Path, killer: Killer | None) -> None:
    """The functions every worker serves: ``charge`` (not idempotent) and ``reserve``."""

    def effect(function: str, order: str) -> str:
        with effects.open("a", encoding="utf-8") as log:
            log.write(f"{function} {order}\n")
            log.flush()
            os.fsync(log.fileno())
        if killer is not None:
            killer.reached("effect", function, order=order)
            killer.reached("unclaimed", function, order=order)
        time.sleep(WORK_SECONDS)
        return f"{function}d {order}"

    @runner.function
    def charge(order: str) -> str:
        """Charge the customer for an order (not safe to repeat)."""
        return effect("charge", order)

    @runner.function(idempotent=True)
    def reserve(order: str) -> str:
        """Reserve stock for an order (safe to repeat)."""
        return effect("reserve", order)


def kill_after_acceptance(runner: RunnerBase, killer: Killer) -> None:
    """Let the killer strike when the server has accepted a result: the store cannot
    see that moment, since the runner writes progress marks later, in batches."""
    core = runner._core
    on_posted = core.on_posted

    def watched(outcome: PostOutcome, now: float) -> None:
        on_posted(outcome, now)
        if outcome.error is None:
            for record in outcome.batch.records:
                for window in ("submitted", "unsaved"):
                    killer.reached(window, record.function_name, call_id=record.key.call_id)

    core.on_posted = watched  # type: ignore[method-assign]


def tools() -> list[dict[str, Any]]:
    """The declarations a test puts on the Session the workers serve."""
    client = Client(api_key="unused", base_url="http://127.0.0.1:9/v1")
    with client, FunctionRunner(client, store=MemoryResultStore()) as runner:
        register(runner, Path(os.devnull), None)
        return runner.tools


def _report_json(report: ServeReport) -> str:
    def plain(value: object) -> object:
        if isinstance(value, CallKey):
            return value.call_id
        if isinstance(value, list):
            return [plain(item) for item in value]
        return value

    return json.dumps({f.name: plain(getattr(report, f.name)) for f in dataclasses.fields(report)})


def _serve_sync(session_id: str, store: ResultStore, effects: Path, killer: Killer) -> ServeReport:
    with (
        Client() as client,
        FunctionRunner(client, store=store, idempotent_fast_path=killer.fast_path) as runner,
    ):
        register(runner, effects, killer)
        kill_after_acceptance(runner, killer)
        return runner.serve(session_id, timeout=30)


async def _serve_async(
    session_id: str, store: ResultStore, effects: Path, killer: Killer
) -> ServeReport:
    async with (
        AsyncClient() as client,
        AsyncFunctionRunner(client, store=store, idempotent_fast_path=killer.fast_path) as runner,
    ):
        register(runner, effects, killer)
        kill_after_acceptance(runner, killer)
        return await runner.serve(session_id, timeout=30)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("session_id")
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--kill", default=None, help="WINDOW:FUNCTION")
    parser.add_argument("--kill-after", type=float, default=None)
    parser.add_argument("--runner", choices=("sync", "async"), default="sync")
    args = parser.parse_args(argv)

    window, function = args.kill.split(":") if args.kill else (None, None)
    if window is not None and window not in WINDOWS:
        parser.error(f"--kill window must be one of {WINDOWS}, got {window!r}")
    killer = Killer(args.workdir, window, function)
    sqlite_store = SQLiteResultStore(args.workdir / "calls.db")
    if window in SHARED_WINDOWS:
        kill_in_shared_commit(sqlite_store, killer, window)
    store: ResultStore = KillingStore(sqlite_store, killer)
    if args.kill_after is not None:
        timer = threading.Timer(args.kill_after, os.kill, (os.getpid(), signal.SIGKILL))
        timer.daemon = True
        timer.start()
    effects = args.workdir / "effects.log"
    if args.runner == "sync":
        report = _serve_sync(args.session_id, store, effects, killer)
    else:
        report = asyncio.run(_serve_async(args.session_id, store, effects, killer))
    print(_report_json(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
