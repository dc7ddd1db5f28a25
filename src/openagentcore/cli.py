"""The ``openagentcore`` command.

Each subcommand registers its parser in :func:`build_parser` and sets ``handler`` to a
function taking the parsed arguments and returning the exit code.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .store import CallRecord, ResultStore

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="openagentcore", description=__doc__.splitlines()[0])
    subcommands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_dev(subcommands)
    _add_calls(subcommands)
    _add_pending(subcommands)
    _add_recover(subcommands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    code: int = args.handler(args, parser)
    return code


def _add_dev(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    dev = subcommands.add_parser(
        "dev",
        help="run the local emulator in the foreground",
        description=(
            "Run the local Agents API emulator with a scripted model; no API key or network needed."
        ),
    )
    dev.add_argument(
        "--host", default="127.0.0.1", help="interface to listen on (default: 127.0.0.1)"
    )
    dev.add_argument(
        "--port", type=int, default=0, help="port to listen on (default: 0, a free port)"
    )
    dev.add_argument(
        "--scenario", metavar="FILE", help="JSON or YAML scenario for the scripted model"
    )
    dev.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="turn on a fault (a field of openagentcore.local.Faults), e.g. duplicate_every=3; "
        "repeatable",
    )
    dev.add_argument("--state", metavar="FILE", help="SQLite file that keeps state across restarts")
    dev.add_argument("--api-key", help="the key clients must send (default: a random one, printed)")
    dev.add_argument(
        "--keepalive",
        type=float,
        default=15.0,
        metavar="SECONDS",
        help="stream keepalive interval (default: 15)",
    )
    dev.set_defaults(handler=_run_dev)


def _run_dev(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    try:
        from openagentcore.local import Faults, LocalCore, Scenario
        from openagentcore.local._faults import parse_fault
        from openagentcore.local._server import serve
    except ImportError as error:
        parser.exit(
            2,
            "openagentcore dev needs the 'local' extra: "
            f"pip install 'openagentcore[local]' ({error})\n",
        )
    try:
        faults = Faults()
        for spec in args.fault:
            faults = parse_fault(spec, faults)
        scenario = Scenario.from_file(args.scenario) if args.scenario else None
    except (OSError, ValueError) as error:
        parser.error(str(error))
    core = LocalCore(
        scenario=scenario,
        faults=faults,
        state=args.state,
        api_key=args.api_key,
        host=args.host,
        port=args.port,
        keepalive_interval=args.keepalive,
    )
    serve(core, announce=lambda line: print(line, flush=True))
    return 0


def _store_option(command: argparse.ArgumentParser, *, required: bool) -> None:
    command.add_argument(
        "--store",
        required=required,
        metavar="PATH_OR_URL",
        help="the result store: a SQLite file or a postgresql:// URL",
    )


def _add_calls(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    calls = subcommands.add_parser("calls", help="inspect the result store")
    actions = calls.add_subparsers(dest="calls_command", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="list recorded calls, oldest first")
    _store_option(listing, required=True)
    listing.add_argument("--session", help="only this Session's calls")
    listing.add_argument(
        "--state",
        action="append",
        default=[],
        help="only calls in this state (started, completed, submitted, applied, in_doubt, "
        "rejected, abandoned); repeatable",
    )
    listing.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")
    listing.set_defaults(handler=_run_calls_list)
    show = actions.add_parser("show", help="show one call's record, saved result included")
    _store_option(show, required=True)
    show.add_argument("call_id")
    show.set_defaults(handler=_run_calls_show)
    prune = actions.add_parser(
        "prune",
        help="delete calls that need nothing more (applied, abandoned or submitted) "
        "older than an age",
    )
    _store_option(prune, required=True)
    prune.add_argument(
        "--older-than",
        required=True,
        type=_age,
        metavar="AGE",
        help="age such as 3600, 90m, 12h or 7d",
    )
    prune.set_defaults(handler=_run_calls_prune)


def _add_pending(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    pending = subcommands.add_parser(
        "pending",
        help="a Session's required actions, and which have saved results",
        description="Reads the Session with OPENAGENTCORE_API_KEY and OPENAGENTCORE_BASE_URL.",
    )
    pending.add_argument("session_id")
    _store_option(pending, required=False)
    pending.set_defaults(handler=_run_pending)


def _add_recover(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    recover = subcommands.add_parser(
        "recover",
        help="resubmit a Session's saved results and list its calls in doubt",
        description=(
            "One reconciliation pass without the application's functions: saved results "
            "are resubmitted as saved; calls in doubt are listed, not resolved (only a "
            "runner that knows the function can decide). Uses OPENAGENTCORE_API_KEY and "
            "OPENAGENTCORE_BASE_URL."
        ),
    )
    recover.add_argument("session_id")
    _store_option(recover, required=True)
    recover.set_defaults(handler=_run_recover)


def _open(spec: str) -> ResultStore:
    from .store import open_store

    return open_store(spec)


def _when(timestamp: float) -> str:
    moment = datetime.datetime.fromtimestamp(timestamp, tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def _record_json(record: CallRecord) -> dict[str, object]:
    return {
        "session_id": record.key.session_id,
        "turn_id": record.key.turn_id,
        "call_id": record.key.call_id,
        "function": record.function_name,
        "state": record.state.value,
        "attempts": record.attempts,
        "owner": record.owner,
        "idempotency_key": record.idempotency_key,
        "arguments_hash": record.arguments_hash,
        "created_at": _when(record.created_at),
        "updated_at": _when(record.updated_at),
        "result": record.result,
    }


def _run_calls_list(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from .store import CallState

    try:
        states = [CallState(value) for value in args.state] or None
    except ValueError as error:
        parser.error(str(error))
    store = _open(args.store)
    try:
        records = store.find(session_id=args.session, states=states, limit=args.limit)
    finally:
        store.close()
    print(f"{'UPDATED (UTC)':19}  {'STATE':9}  {'TRIES':>5}  {'FUNCTION':24}  SESSION / CALL")
    for record in records:
        print(
            f"{_when(record.updated_at):19}  {record.state.value:9}  {record.attempts:>5}  "
            f"{record.function_name[:24]:24}  {record.key.session_id} / {record.key.call_id}"
        )
    print(f"{len(records)} call(s)")
    return 0


def _run_calls_show(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    store = _open(args.store)
    try:
        matches = [r for r in store.find() if r.key.call_id == args.call_id]
    finally:
        store.close()
    if not matches:
        print(f"No call {args.call_id} in {args.store}", file=sys.stderr)
        return 1
    for record in matches:
        print(json.dumps(_record_json(record), indent=2, ensure_ascii=False))
    return 0


def _age(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    number, unit = (text[:-1], text[-1]) if text[-1:] in units else (text, "s")
    try:
        seconds = float(number) * units[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not an age: {text!r} (try 3600, 90m, 12h or 7d)"
        ) from None
    if seconds < 0:
        raise argparse.ArgumentTypeError("an age cannot be negative")
    return seconds


def _run_calls_prune(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    store = _open(args.store)
    try:
        removed = store.prune(older_than=args.older_than)
    finally:
        store.close()
    print(f"Removed {removed} finished call(s)")
    return 0


def _run_pending(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from . import Client
    from .store import CallKey
    from .types import FunctionCallAction

    store = _open(args.store) if args.store else None
    try:
        with Client() as client:
            session = client.sessions.retrieve(args.session_id)
        print(f"Session {session.id}: {session.status}")
        for action in session.required_actions:
            if not isinstance(action, FunctionCallAction):
                print(f"  {action.type} (not a function call)")
                continue
            saved = "store not given"
            if store is not None:
                record = store.get(CallKey(session.id, action.turn_id, action.call_id))
                if record is None:
                    saved = "not in the store"
                elif record.has_result():
                    saved = f"saved result ({record.state.value})"
                else:
                    saved = f"no saved result ({record.state.value})"
            where = f"turn {action.turn_id} call {action.call_id}"
            print(f"  function_call {action.name} {where}: {saved}")
        if not session.required_actions:
            print("  nothing pending")
    finally:
        if store is not None:
            store.close()
    return 0


def _run_recover(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from . import Client, FunctionRunner

    with Client() as client:
        runner = FunctionRunner(client, store=args.store, max_concurrency=1)
        try:
            report = runner.recover(args.session_id)
        finally:
            runner.close()
    print(f"Session {args.session_id}: {report.results_resubmitted} saved result(s) resubmitted")
    for key in report.in_doubt:
        print(f"  in doubt: call {key.call_id} (turn {key.turn_id}); run your runner to resolve it")
    for key in report.left_pending:
        print(f"  pending without a saved result: call {key.call_id} (turn {key.turn_id})")
    for key in report.conflicts:
        print(f"  conflict: the server holds a different result for call {key.call_id}")
    for key in report.rejected:
        print(f"  refused: the server did not accept the saved result for call {key.call_id}")
    if report.store_errors:
        print(
            f"  the result store was unreachable {report.store_errors} time(s), so some calls "
            "may not have been looked at; run recover again once it is back"
        )
    return 1 if report.conflicts or report.rejected or report.store_errors else 0


if __name__ == "__main__":
    sys.exit(main())
