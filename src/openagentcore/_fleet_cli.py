"""``openagentcore worker`` and ``openagentcore fleet status|adopt|release``."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["add_fleet", "add_worker"]


def add_worker(new: Callable[..., argparse.ArgumentParser]) -> None:
    worker = new(
        "worker",
        help="serve every Session of an Agent, shared with the other workers",
        description=(
            "Import MODULE:ATTR (a FunctionRunner or an AsyncFunctionRunner) from the "
            "current directory and serve every Session of the Agents given, sharing them "
            "with the other workers of the group through the runner's result store, until "
            "SIGTERM or Ctrl-C; "
            "exits 0 after handing its Sessions over."
        ),
    )
    worker.add_argument("target", metavar="MODULE:ATTR", help="where the runner is")
    worker.add_argument("--agent", action="append", required=True, metavar="AGENT_ID")
    worker.add_argument("--group", default="default", help="the workers sharing Sessions")
    worker.add_argument("--max-sessions", type=int, default=None, metavar="N")
    for knob, default, what in (
        ("heartbeat-interval", 1.0, "how often the worker heartbeats and re-plans"),
        ("worker-ttl", 10.0, "a worker silent this long loses its Sessions"),
        ("park-after", 30.0, "how long an idle Session stays followed"),
        ("discovery-interval", 2.0, "how often new Sessions are listed"),
        ("sweep-interval", 60.0, "how often all Sessions are listed to wake parked ones"),
    ):
        worker.add_argument(
            f"--{knob}",
            type=float,
            default=default,
            metavar="SECONDS",
            help=f"{what} (default: {default:g})",
        )
    worker.set_defaults(handler=run_worker)


def add_fleet(
    new: Callable[..., argparse.ArgumentParser],
    new_action: Callable[..., argparse.ArgumentParser],
    store_options: Callable[..., None],
) -> None:
    """``new`` makes a subcommand; ``new_action(actions, name, ...)`` one of its actions."""
    fleet = new(
        "fleet",
        help="see and change which worker follows which Session",
        description="The fleet's workers and Sessions, from its store's database.",
    )
    actions = fleet.add_subparsers(dest="fleet_command", metavar="ACTION", required=True)
    for name, help_text in (
        ("status", "list the workers and the Sessions they own"),
        ("adopt", "hand a Session to the fleet now (wakes it if parked)"),
        ("release", "take a Session from its owner; a live worker takes it"),
    ):
        action = new_action(actions, name, help=help_text, description=help_text)
        action.set_defaults(handler=run_fleet, fleet_command=name)
        store_options(action, required=True)
        action.add_argument("--group", default="default")
        if name == "status":
            action.add_argument("--json", action="store_true", help="print one JSON document")
        else:
            action.add_argument("session_id")
        if name == "adopt":
            action.add_argument("--agent", required=True, metavar="AGENT_ID")


def _directory(args: argparse.Namespace) -> Any:
    from .runner._fleet_directory import DEFAULT_TABLE, PostgresDirectory, SQLiteDirectory

    spec: str = args.store
    table = args.table or DEFAULT_TABLE
    if spec.lower().startswith(("postgresql://", "postgres://")):
        return PostgresDirectory(
            spec, schema=args.schema or "public", table=table, group=args.group
        )
    if not Path(spec).is_file():
        from .cli import EXIT_STORE, CommandError

        raise CommandError(
            EXIT_STORE,
            f"no result store at {spec} (this command never creates one); check --store",
        )
    return SQLiteDirectory(spec, table=table, group=args.group)


def run_fleet(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    directory = _directory(args)
    try:
        if args.fleet_command == "adopt":
            directory.adopt([(args.session_id, args.agent)])
            print(f"adopted {args.session_id}")
        elif args.fleet_command == "release":
            if not directory.release_session(args.session_id):
                print(
                    f"{args.session_id} is not in the fleet's group {args.group}", file=sys.stderr
                )
                return 1
            print(f"released {args.session_id}")
        else:
            status = directory.status()
            if args.json:
                print(
                    json.dumps(
                        {
                            "workers": [
                                {
                                    "worker": w,
                                    "seconds_since_heartbeat": round(age, 3),
                                    "sessions": n,
                                }
                                for w, age, n in status.workers
                            ],
                            "sessions": [
                                {"session": s, "agent": a, "state": st, "owner": o, "epoch": e}
                                for s, a, st, o, e in status.sessions
                            ],
                        }
                    )
                )
            else:
                print(f"{len(status.workers)} workers")
                for w, age, n in status.workers:
                    print(f"  {w}  heartbeat {age:.1f} s ago  {n} Sessions")
                print(f"{len(status.sessions)} Sessions")
                for s, _, st, o, e in status.sessions:
                    print(f"  {s}  {st}  owner {o or '-'}  epoch {e}")
    finally:
        directory.close()
    return 0


class _EarlySignal:
    """SIGTERM/SIGINT from the worker's first line on. Before the runner serves (the
    application still importing) a signal means: do not start; once it serves, it
    reaches the runner (an AsyncFunctionRunner through its loop, after ``serve_agent``
    began listening before its first ``await``; a FunctionRunner's ``stop()`` is safe
    in a signal handler and kept until its fleet listens), so no signal falls between
    the two and kills the worker with a non-zero status."""

    def __init__(self) -> None:
        self.requested = False
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stop: Callable[[], None] | None = None

    def __call__(self) -> None:  # in a signal handler
        self.requested = True
        if self.stop is None:
            return
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.stop)
        else:
            self.stop()


def run_worker(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from .runner._signals import on_shutdown_signal

    signalled = _EarlySignal()
    with on_shutdown_signal(signalled):
        return _run_worker(args, parser, signalled)


def _run_worker(
    args: argparse.Namespace, parser: argparse.ArgumentParser, signalled: _EarlySignal
) -> int:
    from .runner import AsyncFunctionRunner, FunctionRunner
    from .runner._fleet import ServeAgentOptions, StopRequest

    module_name, _, attribute = args.target.partition(":")
    if not module_name or not attribute:
        parser.error(f"MODULE:ATTR must name a module and an attribute, got {args.target!r}")
    sys.path.insert(0, os.getcwd())  # as uvicorn and celery do
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name != module_name:
            raise
        parser.error(f"no module {module_name} in {os.getcwd()}; run the worker from its directory")
    runner = getattr(module, attribute, None)
    if not isinstance(runner, (FunctionRunner, AsyncFunctionRunner)):
        parser.error(
            f"{args.target} must be a FunctionRunner or an AsyncFunctionRunner, "
            f"got {type(runner).__name__}"
        )
    options: ServeAgentOptions = {
        "group": args.group,
        "max_sessions": args.max_sessions,
        "heartbeat_interval": args.heartbeat_interval,
        "worker_ttl": args.worker_ttl,
        "park_after": args.park_after,
        "discovery_interval": args.discovery_interval,
        "sweep_interval": args.sweep_interval,
    }
    not_started = json.dumps({"worker": None, "handed_over": 0})
    if isinstance(runner, AsyncFunctionRunner):

        async def serve(runner: AsyncFunctionRunner) -> str:
            signalled.stop = runner.stop
            signalled.loop = asyncio.get_running_loop()
            try:
                if signalled.requested:  # before the loop ran: nothing taken or handed
                    return not_started
                report = await runner.serve_agent(*args.agent, **options)
                return json.dumps({"worker": report.worker_id, "handed_over": report.handed_over})
            finally:
                await runner.close()

        print(asyncio.run(serve(runner)))
        return 0
    stop = StopRequest()  # set by a signal from now on, heeded once serve_agent listens
    signalled.stop = stop.set
    with runner:
        if signalled.requested:
            print(not_started)
            return 0
        report = runner._serve_agent(stop, *args.agent, **options)
    print(json.dumps({"worker": report.worker_id, "handed_over": report.handed_over}))
    return 0
