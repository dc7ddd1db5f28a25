"""The ``openagentcore`` command: a local emulator and tools to inspect and settle calls.

Each subcommand registers its parser in `build_parser` and sets ``handler`` to a function
taking the parsed arguments and returning the exit code. Expected failures (a missing
key, an unknown Session, an unreachable server or store) are raised as exceptions and
turned by `main` into one line on stderr and one of the exit codes below; ``--debug``
shows the traceback instead.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import functools
import json
import logging
import os
import sqlite3
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from ._fleet_cli import add_fleet, add_worker

if TYPE_CHECKING:
    from . import Client, FunctionRunner
    from .runner import ServeReport
    from .store import CallRecord, ResultStore

__all__ = [
    "EXIT_API_ERROR",
    "EXIT_ATTENTION",
    "EXIT_CONFIG",
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_STORE",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
    "build_parser",
    "main",
]

EXIT_OK = 0
#: ``recover`` found something a person must look at (a call in doubt, a conflict, a
#: refused result, an unreachable store); ``calls show`` or ``calls resolve`` found no
#: such call, or ``calls resolve`` a call that is not in doubt.
EXIT_ATTENTION = 1
#: The command line is wrong, or a file or address it names cannot be used (``dev``).
EXIT_USAGE = 2
#: Configuration: no API key or base URL, a base URL that is not http(s), the server
#: refused the key (401/403), or a package the command needs is not installed.
EXIT_CONFIG = 3
#: The server has no such Session (404).
EXIT_NOT_FOUND = 4
#: The server could not be reached, timed out, kept failing (5xx) after retries, or
#: answered with something that is not the API (a body that is not JSON).
EXIT_UNREACHABLE = 5
#: The result store does not exist, is not a result store, cannot be opened or is
#: unreachable.
EXIT_STORE = 6
#: The server refused the request for another reason (another 4xx).
EXIT_API_ERROR = 7
#: Reserved for bugs in openagentcore: the message asks for ``--debug`` and a report.
EXIT_INTERNAL = 70
#: Stopped with Ctrl-C.
EXIT_INTERRUPTED = 130

_EXIT_CODES_HELP = f"""\
exit codes:
  {EXIT_OK:<3}  success
  {EXIT_ATTENTION:<3}  recover: a call in doubt, a conflict, a refused result or an
       unreachable store needs a person; calls show/resolve: no such call in
       the store; calls resolve: the call is not in doubt
  {EXIT_USAGE:<3}  bad command line, or a file or address it names cannot be used
  {EXIT_CONFIG:<3}  no API key or base URL, a base URL that is not http(s), the server
       refused the key, or a package the command needs is not installed
  {EXIT_NOT_FOUND:<3}  the server has no such Session
  {EXIT_UNREACHABLE:<3}  the server could not be reached, kept failing, or did not answer
       as the API does
  {EXIT_STORE:<3}  the result store does not exist, is not one, cannot be opened or is
       unreachable
  {EXIT_API_ERROR:<3}  the server refused the request for another reason
  {EXIT_INTERNAL:<3}  reserved for bugs in openagentcore (run again with --debug and
       report it)
  {EXIT_INTERRUPTED:<3}  interrupted

Environment: OPENAGENTCORE_API_KEY and OPENAGENTCORE_BASE_URL (the API root, with /v1)
for commands that talk to the server."""


class CommandError(Exception):
    """An expected failure: ``main`` prints ``message`` on one line and exits with ``code``."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class _Parser(argparse.ArgumentParser):
    """argparse, with a bad command line told in one line that points to ``--help``
    (instead of the usage block, then the error)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {_printable(message)}; see {self.prog} --help\n")


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: ``dev``, ``calls list|show|resolve|prune``, ``pending``,
    ``recover``."""
    from . import __version__

    parser: argparse.ArgumentParser = _Parser(
        prog="openagentcore",
        description=(
            "Run a local Agents API emulator, and inspect or settle the function calls\n"
            "a runner's result store remembers."
        ),
        epilog=_EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"openagentcore {__version__}")
    _debug_option(parser, default=False)
    subcommands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_dev(subcommands)
    _add_calls(subcommands)
    _add_pending(subcommands)
    _add_recover(subcommands)
    add_worker(functools.partial(_new_subcommand, subcommands))
    add_fleet(functools.partial(_new_subcommand, subcommands), _new_subcommand, _store_options)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line and return its exit code (the ``EXIT_*`` constants)."""
    args = build_parser().parse_args(argv)
    with _logs_on_request():
        return _run(args)


@contextlib.contextmanager
def _logs_on_request() -> Iterator[None]:
    """The runner logs each retry and each failed read, and Python prints such lines
    through its last-resort handler when nothing is configured: the CLI says the outcome
    in one line instead, and shows the log only when ``OPENAGENTCORE_LOG`` asks for it."""
    from ._logs import log_level

    logger = logging.getLogger("openagentcore")
    silencer = logging.NullHandler()
    if log_level() is None:
        logger.addHandler(silencer)
    try:
        yield
    finally:
        logger.removeHandler(silencer)


def _run(args: argparse.Namespace) -> int:
    parser: argparse.ArgumentParser = args.command_parser
    try:
        code: int = args.handler(args, parser)
    except KeyboardInterrupt:
        if args.debug:
            raise
        print("openagentcore: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader stopped reading (``| head``): exit quietly, as ``ls | head`` does.
        # Python would report the pipe again when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except Exception as error:
        if args.debug:
            raise
        failure = error if isinstance(error, CommandError) else _explain(error)
        print(f"{parser.prog}: {_printable(failure.message)}", file=sys.stderr)
        return failure.code
    return code


def _debug_option(parser: argparse.ArgumentParser, *, default: object) -> None:
    parser.add_argument(
        "--debug",
        action="store_true",
        default=default,
        help="show the full traceback of a failure instead of one line",
    )


def _new_subcommand(
    subcommands: argparse._SubParsersAction[argparse.ArgumentParser], name: str, **kwargs: Any
) -> argparse.ArgumentParser:
    command = subcommands.add_parser(
        name,
        epilog="Exit codes: see openagentcore --help.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        **kwargs,
    )
    # Also accepted after the subcommand; SUPPRESS keeps a top-level --debug.
    _debug_option(command, default=argparse.SUPPRESS)
    # The innermost subcommand's parser, for its usage line in errors.
    command.set_defaults(command_parser=command)
    return command


def _where(error: Exception) -> str:
    """The server an API error was about, without credentials or the query string."""
    request = getattr(error, "request", None)
    if request is None:
        return "the server"
    url = request.url
    return str(url.copy_with(username=None, password=None, query=None, fragment=None))


def _explain(error: Exception) -> CommandError:
    """One line for a failure the user can fix, and its exit code.

    An error that wraps another (the runner's ``RunnerError`` around a 404, say) keeps
    its own message and takes the exit code of the failure underneath.
    """
    from . import APIError
    from .store import StoreError

    explained = _explain_one(error)
    cause = error.__cause__ or error.__context__
    while cause is not None:
        if isinstance(cause, (APIError, StoreError)):
            return CommandError(_explain_one(cause).code, explained.message)
        cause = cause.__cause__ or cause.__context__
    return explained


def _explain_one(error: BaseException) -> CommandError:
    from httpx import InvalidURL

    from . import (
        APIConnectionError,
        APIResponseValidationError,
        APIStatusError,
        AuthenticationError,
        InternalServerError,
        NotFoundError,
        OpenAgentCoreError,
        PermissionDeniedError,
        RateLimitError,
        ServiceUnavailableError,
    )
    from .store import StoreError

    if isinstance(error, APIConnectionError):
        # A runner that gave up wraps the last connection error in advice of its own:
        # say what went wrong once, and the advice once.
        underneath: APIConnectionError = error
        while isinstance(underneath.__cause__, APIConnectionError):
            underneath = underneath.__cause__
        return CommandError(
            EXIT_UNREACHABLE,
            f"cannot reach {_where(error)} ({underneath.message.rstrip('.')}); check "
            "OPENAGENTCORE_BASE_URL and that the server is running",
        )
    if isinstance(error, APIResponseValidationError):
        return CommandError(
            EXIT_UNREACHABLE,
            f"{_where(error)} did not answer as the Agents API does ({error.message}); check "
            "that OPENAGENTCORE_BASE_URL is the API root (with /v1) and any proxy in between",
        )
    if isinstance(error, (AuthenticationError, PermissionDeniedError)):
        return CommandError(
            EXIT_CONFIG,
            f"the server refused the API key ({error.status_code}: {error.message}); "
            "check OPENAGENTCORE_API_KEY",
        )
    if isinstance(error, NotFoundError):
        return CommandError(
            EXIT_NOT_FOUND,
            f"not found at {_where(error)} ({error.message.rstrip('.')}); check the id and "
            "OPENAGENTCORE_BASE_URL",
        )
    if isinstance(error, (InternalServerError, ServiceUnavailableError, RateLimitError)):
        return CommandError(
            EXIT_UNREACHABLE,
            f"{_where(error)} kept failing ({error.status_code}: {error.message}); try again later",
        )
    if isinstance(error, APIStatusError):
        return CommandError(
            EXIT_API_ERROR,
            f"the server refused the request ({error.status_code}: {error.message})",
        )
    if isinstance(error, StoreError):
        return CommandError(EXIT_STORE, f"result store: {error}")
    if isinstance(error, sqlite3.DatabaseError):
        # The SQLite store lets these through on open, e.g. for a file of another kind.
        return CommandError(
            EXIT_STORE, f"the --store file is not a usable SQLite result store ({error})"
        )
    if isinstance(error, ImportError):
        return CommandError(
            EXIT_CONFIG,
            f"a package this command needs is not installed ({error}); reinstall "
            "openagentcore with its extras, e.g. pip install 'openagentcore[local,postgres]'",
        )
    if isinstance(error, InvalidURL):
        return CommandError(
            EXIT_CONFIG, f"OPENAGENTCORE_BASE_URL is not a usable URL ({error}); check it"
        )
    if isinstance(error, OpenAgentCoreError):
        # Raised before anything was sent: no API key or base URL.
        return CommandError(EXIT_CONFIG, str(error))
    return CommandError(
        EXIT_INTERNAL,
        f"unexpected {type(error).__name__}: {error}. This is a bug in openagentcore: run "
        "again with --debug and report the traceback",
    )


def _add_dev(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    dev = _new_subcommand(
        subcommands,
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
        "--port", type=_port, default=0, help="port to listen on (default: 0, a free port)"
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
        raise CommandError(
            EXIT_CONFIG,
            f"openagentcore dev needs the 'local' extra ({error}): "
            "pip install 'openagentcore[local]'",
        ) from None
    faults = Faults()
    for spec in args.fault:
        try:
            faults = parse_fault(spec, faults)
        except ValueError as error:
            parser.error(str(error))
    scenario = None
    if args.scenario:
        try:
            scenario = Scenario.from_file(args.scenario)
        except OSError as error:
            raise CommandError(
                EXIT_USAGE,
                f"cannot read --scenario {args.scenario}: {error.strerror or error}; "
                "check the path",
            ) from None
        except (ValueError, UnicodeDecodeError) as error:
            # The message names the file and what is wrong in it.
            raise CommandError(EXIT_USAGE, f"{error}; fix the --scenario file") from None
    core = LocalCore(
        scenario=scenario,
        faults=faults,
        state=args.state,
        api_key=args.api_key,
        host=args.host,
        port=args.port,
        keepalive_interval=args.keepalive,
    )
    try:
        core.start()
    except OSError as error:
        raise CommandError(EXIT_USAGE, _cannot_listen(args.host, args.port, error)) from None
    except sqlite3.DatabaseError as error:
        raise CommandError(
            EXIT_USAGE,
            f"cannot use --state {args.state} ({error}): name a new file, or one an "
            "earlier openagentcore dev --state wrote",
        ) from None
    serve(core, announce=lambda line: print(line, flush=True))
    return EXIT_OK


def _cannot_listen(host: str, port: int, error: OSError) -> str:
    """Why the emulator cannot listen on ``host:port``, and which option to change."""
    import errno
    import socket

    where = f"cannot listen on {host}:{port}"
    if isinstance(error, socket.gaierror):
        return f"{where}: unknown host {host!r}; use --host 127.0.0.1 (or 0.0.0.0 for all)"
    if error.errno == errno.EADDRINUSE:
        return (
            f"{where}: the port is in use (another program, or another openagentcore dev); "
            "choose another --port, or --port 0 for a free one"
        )
    if error.errno == errno.EADDRNOTAVAIL:
        return (
            f"{where}: no network interface of this machine has that address; use --host "
            "127.0.0.1 (or 0.0.0.0 for all)"
        )
    if error.errno == errno.EACCES:
        return f"{where}: permission denied; choose a --port above 1023, or --port 0"
    return f"{where}: {error.strerror or error}; check --host and --port"


def _store_options(command: argparse.ArgumentParser, *, required: bool) -> None:
    command.add_argument(
        "--store",
        required=required,
        metavar="PATH_OR_URL",
        help="the result store: an existing SQLite file or a postgresql:// URL",
    )
    command.add_argument(
        "--schema",
        help="PostgreSQL stores only: the schema of the store's table (default: public)",
    )
    command.add_argument(
        "--table",
        help="PostgreSQL stores only: the store's table (default: openagentcore_calls)",
    )


def _json_option(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--json", action="store_true", help="print one JSON document on stdout instead of text"
    )


def _add_calls(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    calls = _new_subcommand(
        subcommands,
        "calls",
        help="inspect the result store",
        description="Inspect and prune the calls a result store remembers.",
    )
    actions = calls.add_subparsers(dest="calls_command", metavar="ACTION", required=True)
    listing = _new_subcommand(
        actions,
        "list",
        help="list recorded calls, oldest first",
        description="List recorded calls, oldest first.",
    )
    _store_options(listing, required=True)
    listing.add_argument("--session", type=_text, help="only this Session's calls")
    listing.add_argument(
        "--state",
        action="append",
        default=[],
        help="only calls in this state (started, completed, submitted, applied, in_doubt, "
        "rejected, abandoned); repeatable. in_doubt also lists started calls whose owner is "
        "gone (its process died or its lease ran out)",
    )
    listing.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")
    _json_option(listing)
    listing.set_defaults(handler=_run_calls_list)
    show = _new_subcommand(
        actions,
        "show",
        help="show one call's record, saved result included",
        description="Show the records of a call id (one per Session that used it).",
    )
    _store_options(show, required=True)
    show.add_argument("call_id")
    _json_option(show)
    show.set_defaults(handler=_run_calls_show)
    resolve = _new_subcommand(
        actions,
        "resolve",
        help="settle a call in doubt by hand",
        description=(
            "Settle a call in doubt (started, no saved result, its owner gone) once you "
            "know what its function did. --output and --failed save a result that the next "
            "serve or recover submits; --rerun clears the call to run again: the next runner "
            "serving the Session runs the function, and the record keeps its history. A call "
            "whose result the server refused (rejected) takes --output or --failed: the answer "
            "goes to the server at once, and the record keeps the refused result."
        ),
    )
    _store_options(resolve, required=True)
    resolve.add_argument("call_id")
    resolve.add_argument(
        "--session", type=_text, help="the call's Session, if several use this call id"
    )
    outcome = resolve.add_mutually_exclusive_group(required=True)
    outcome.add_argument("--output", metavar="TEXT", help="the function succeeded with TEXT")
    outcome.add_argument("--failed", metavar="MESSAGE", help="the call failed with MESSAGE")
    outcome.add_argument(
        "--rerun", action="store_true", help="run the function again (its effect is safe to repeat)"
    )
    _json_option(resolve)
    resolve.set_defaults(handler=_run_calls_resolve)
    prune = _new_subcommand(
        actions,
        "prune",
        help="delete calls that need nothing more (applied, abandoned or submitted) "
        "older than an age",
        description="Delete calls that need nothing more (applied, abandoned or submitted) "
        "and were last updated longer ago than AGE.",
    )
    _store_options(prune, required=True)
    prune.add_argument(
        "--older-than",
        required=True,
        type=_age,
        metavar="AGE",
        help="age such as 3600, 90m, 12h or 7d (at least 1h without --force)",
    )
    prune.add_argument(
        "--force",
        action="store_true",
        help="allow an age under an hour, though a live runner may still need such records",
    )
    prune.set_defaults(handler=_run_calls_prune)


def _add_pending(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    pending = _new_subcommand(
        subcommands,
        "pending",
        help="a Session's required actions, and which have saved results",
        description="List a Session's required actions and, given a store, which of them "
        "have a saved result. Reads the Session with OPENAGENTCORE_API_KEY and "
        "OPENAGENTCORE_BASE_URL.",
    )
    pending.add_argument("session_id", type=_session_id)
    _store_options(pending, required=False)
    _json_option(pending)
    pending.set_defaults(handler=_run_pending)


def _add_recover(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    recover = _new_subcommand(
        subcommands,
        "recover",
        help="resubmit a Session's saved results and list its calls in doubt",
        description=(
            "One reconciliation pass without the application's functions: saved results "
            "are resubmitted as saved; calls in doubt are listed, not resolved (only a "
            "runner that knows the function can decide). Uses OPENAGENTCORE_API_KEY and "
            "OPENAGENTCORE_BASE_URL."
        ),
    )
    target = recover.add_mutually_exclusive_group(required=True)
    target.add_argument("session_id", nargs="?", type=_session_id, help="the Session to recover")
    target.add_argument(
        "--agent", metavar="AGENT_ID", help="recover every Session of this Agent, one by one"
    )
    recover.add_argument(
        "--give-up-after",
        type=_seconds,
        default=60.0,
        metavar="SECONDS",
        help="end with an error when the server stays unreachable, or keeps failing, this "
        "long (default: 60)",
    )
    _store_options(recover, required=True)
    _json_option(recover)
    recover.set_defaults(handler=_run_recover)


def _is_postgres(spec: str) -> bool:
    return spec.lower().startswith(("postgresql://", "postgres://"))


def _open(args: argparse.Namespace, parser: argparse.ArgumentParser) -> ResultStore:
    """Open the existing store ``--store`` names; never create one.

    A typo in a path or table name must not answer "0 calls" from a new, empty store.
    """
    spec: str = args.store
    if not _is_postgres(spec):
        if args.schema is not None or args.table is not None:
            parser.error("--schema and --table apply to postgresql:// stores only")
        path = Path(spec)
        if not path.is_file():
            problem = "not a file" if path.exists() else "the file does not exist"
            raise CommandError(
                EXIT_STORE,
                f"no result store at {spec}: {problem} (this command never creates one); "
                "check --store",
            )
        reason = _not_a_store(path)
        if reason is not None:
            raise CommandError(
                EXIT_STORE, f"{spec} is not a result store ({reason}); check --store"
            )
        from .store import SQLiteResultStore

        return SQLiteResultStore(spec)
    return _open_postgres(spec, args, parser)


#: The first bytes of every SQLite database file.
_SQLITE_HEADER = b"SQLite format 3\x00"


def _not_a_store(path: Path) -> str | None:
    """Why the file at ``path`` is no result store, or ``None`` if it may be one: a
    mistyped path naming some other file is not a store to call damaged, nor one to
    add a table to. An empty file, or a database without tables, is a store never used."""
    from .store._sqlite import _TABLE

    try:
        with path.open("rb") as file:
            head = file.read(len(_SQLITE_HEADER))
    except OSError:
        return None  # opening it says why
    if head == b"":
        return None
    if head != _SQLITE_HEADER:
        return "not a SQLite database"
    try:
        with contextlib.closing(
            sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        ) as connection:
            tables = {
                row[0]
                for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            }
    except sqlite3.Error:
        return None  # opening it as a store says why
    if tables and _TABLE not in tables:
        return f"a SQLite database without the {_TABLE} table"
    return None


def _open_postgres(
    dsn: str, args: argparse.Namespace, parser: argparse.ArgumentParser
) -> ResultStore:
    try:
        import psycopg
        import psycopg.conninfo
        import psycopg_pool  # noqa: F401  (PostgresResultStore needs it too)

        from .store import PostgresResultStore
    except ImportError as error:
        raise CommandError(
            EXIT_CONFIG,
            f"psycopg is not installed ({error}), and PostgreSQL stores need it: "
            "pip install 'openagentcore[postgres]'",
        ) from None
    schema = args.schema or "public"
    table = args.table or "openagentcore_calls"
    try:
        psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        # libpq quotes the URL, password included, in its parse errors: say nothing of it.
        raise CommandError(
            EXIT_STORE,
            "the --store URL cannot be parsed as a PostgreSQL connection string; check its "
            "host (an IPv6 address goes in [brackets]), port and %-escapes",
        ) from None
    try:
        with psycopg.connect(dsn, connect_timeout=10) as connection:
            row = connection.execute(
                "SELECT to_regclass(format('%%I.%%I', %s::text, %s::text))", (schema, table)
            ).fetchone()
    except psycopg.Error as error:
        # psycopg's messages name the host and port but never the password.
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise CommandError(EXIT_STORE, f"cannot connect to PostgreSQL: {reason}") from None
    if row is None or row[0] is None:
        raise CommandError(
            EXIT_STORE,
            f"no result store table {schema}.{table} in that database (this command never "
            "creates one); check --store, --schema and --table",
        )
    try:
        return PostgresResultStore(dsn, schema=schema, table=table, pool_timeout=10)
    except ValueError as error:
        parser.error(str(error))


def _say(line: str) -> None:
    """Print one line of text output (see :func:`_printable`)."""
    print(_printable(line))


def _printable(line: str) -> str:
    """``line`` with its control characters (and lone surrogates) escaped. Ids and names
    come from the server, the model or the store: none may move the cursor, retitle
    the terminal or forge a line of the output."""
    if line.isprintable():
        return line
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in line)


def _when(timestamp: float) -> str:
    moment = _moment(timestamp)
    return str(timestamp) if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S")


def _iso(timestamp: float) -> str | float:
    moment = _moment(timestamp)
    if moment is None:
        return timestamp
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _moment(timestamp: float) -> datetime.datetime | None:
    """``timestamp`` as a UTC time, or ``None`` outside what a date can show (a row
    changed by hand): the raw number is shown instead."""
    try:
        return datetime.datetime.fromtimestamp(timestamp, tz=datetime.timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None


def _record_json(record: CallRecord, *, in_doubt: bool) -> dict[str, object]:
    """``in_doubt``: whether the call is in doubt now (marked so, or started without a
    result by an owner that is gone); ``in_doubt_at``/``settled_by`` keep its history,
    ``history`` each decision a person took (``calls resolve``).
    ``late_outcome``: what the function produced after its timeout (never sent)."""
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
        "created_at": _iso(record.created_at),
        "updated_at": _iso(record.updated_at),
        "in_doubt": in_doubt,
        "in_doubt_at": None if record.in_doubt_at is None else _iso(record.in_doubt_at),
        "settled_by": record.settled_by,
        "result": record.result,
        "late_outcome": record.late_outcome,
        "late_at": None if record.late_at is None else _iso(record.late_at),
        "history": [_decision_json(entry) for entry in record.history],
    }


def _decision_json(entry: dict[str, Any]) -> dict[str, Any]:
    """A decision by hand from ``record.history``, its time shown as the others are."""
    at = entry.get("at")
    return {**entry, "at": _iso(at)} if isinstance(at, (int, float)) else dict(entry)


def _print_json(document: object) -> None:
    print(json.dumps(document, indent=2, ensure_ascii=False))


def _run_calls_list(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from .store import CallState
    from .store._records import cleared_to_rerun

    try:
        states = {CallState(value) for value in args.state} or None
    except ValueError as error:
        parser.error(str(error))
    store = _open(args, parser)
    try:
        if states is not None and CallState.IN_DOUBT in states:
            # A started call whose owner is gone is in doubt too, though no runner has
            # marked it yet (recover lists such calls without touching them).
            found = store.find(session_id=args.session, states=states | {CallState.STARTED})
            records = [
                record for record in found if record.state in states or store.is_stale(record)
            ][: args.limit]
        else:
            records = store.find(session_id=args.session, states=states, limit=args.limit)
        doubted = {record.key for record in records if _in_doubt(store, record)}
    finally:
        store.close()
    if args.json:
        _print_json([_record_json(r, in_doubt=r.key in doubted) for r in records])
        return EXIT_OK
    _say(f"{'UPDATED (UTC)':19}  {'STATE':9}  {'TRIES':>5}  {'FUNCTION':24}  SESSION / CALL")
    for record in records:
        note = ""
        if record.state is CallState.STARTED and record.key in doubted:
            note = "  (in doubt: its owner is gone)"
        elif cleared_to_rerun(record):
            note = f"  (in doubt; to run again: {record.settled_by})"
        elif record.settled_by is not None:
            note = f"  (was in doubt; settled by {record.settled_by})"
        if record.late_outcome is not None:
            how = "succeeded" if record.late_outcome.get("success") is True else "failed"
            # Its result came from an answer to the doubt, not from this run's timeout.
            answered = record.settled_by in ("failed", "result") or (
                record.settled_by or ""
            ).startswith("manual:")
            when = "after another worker settled it" if answered else "after its timeout"
            note += f"  (finished {when}: {how}; see calls show)"
        _say(
            f"{_when(record.updated_at):19}  {record.state.value:9}  {record.attempts:>5}  "
            f"{record.function_name[:24]:24}  {record.key.session_id} / {record.key.call_id}"
            f"{note}"
        )
    _say(f"{len(records)} call(s)")
    return EXIT_OK


def _in_doubt(store: ResultStore, record: CallRecord) -> bool:
    from .store import CallState

    return record.state is CallState.IN_DOUBT or store.is_stale(record)


def _run_calls_show(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    store = _open(args, parser)
    try:
        matches = [r for r in store.find() if r.key.call_id == args.call_id]
        shown = [_record_json(r, in_doubt=_in_doubt(store, r)) for r in matches]
    finally:
        store.close()
    if args.json:
        _print_json(shown)
    else:
        for document in shown:
            _print_record(document)
    if not matches:
        print(f"No call {args.call_id} in {args.store}", file=sys.stderr)
        return EXIT_ATTENTION
    return EXIT_OK


def _print_record(record: dict[str, Any]) -> None:
    """One record of ``calls show`` for a person: a line per field, results in short."""
    _say(f"Call {record['call_id']} of Session {record['session_id']}, turn {record['turn_id']}")
    fields: list[tuple[str, object]] = [
        ("function", record["function"]),
        ("state", record["state"]),
        ("attempts", record["attempts"]),
        ("owner", record["owner"] or "-"),
        ("created", _shown_time(record["created_at"])),
        ("updated", _shown_time(record["updated_at"])),
        ("result", _outcome(record["result"])),
    ]
    if record["in_doubt"]:
        fields.append(("in doubt", "yes: settle it with `openagentcore calls resolve`"))
    elif record["in_doubt_at"] is not None:
        settled = record["settled_by"] or "a runner"
        fields.append(("in doubt", f"was, at {_shown_time(record['in_doubt_at'])}; {settled}"))
    if record["late_outcome"] is not None:
        late = f"{_outcome(record['late_outcome'])} (at {_shown_time(record['late_at'])}, not sent)"
        fields.append(("after timeout", late))
    for entry in record["history"]:
        owner = entry.get("owner") or "no owner"
        decided = (
            f"{entry.get('settled_by')} at {_shown_time(entry.get('at'))}, on attempt "
            f"{entry.get('attempts')} ({entry.get('state')}, {owner})"
        )
        fields.append(("decided", decided))
    for name, value in fields:
        _say(f"  {name + ':':15}{value}")


def _shown_time(value: object) -> str:
    """An ISO time from ``_record_json`` as ``calls list`` shows times."""
    return str(value).replace("T", " ").replace("Z", " UTC")


def _outcome(event: dict[str, Any] | None) -> str:
    """A saved result in short: what the function returned, or why it failed."""
    if event is None:
        return "none saved"
    if event.get("success") is True:
        output = event.get("output")
        shown = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
        return f"succeeded: {shown}"
    return f"failed: {event.get('error')}"


def _run_calls_resolve(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from . import APIStatusError
    from ._operator import resolve_call
    from .store import CallState, InvalidTransitionError, StoreError

    store = _open(args, parser)
    try:
        matches = [r for r in store.find(session_id=args.session) if r.key.call_id == args.call_id]
        if not matches:
            where = f" of Session {args.session}" if args.session else ""
            raise CommandError(EXIT_ATTENTION, f"no call {args.call_id}{where} in {args.store}")
        if len(matches) > 1:
            sessions = ", ".join(r.key.session_id for r in matches)
            parser.error(f"call {args.call_id} is in several Sessions ({sessions}); add --session")
        (record,) = matches
        key = record.key
        decision: dict[str, Any] = (
            {"rerun": True}
            if args.rerun
            else {"failed": args.failed}
            if args.failed is not None
            else {"output": args.output}
        )
        # Only the answer to a refused result goes to the server (--rerun is refused
        # there without one): settling a call in doubt needs no API key.
        answering = record.state is CallState.REJECTED and not args.rerun
        try:
            with _client() if answering else contextlib.nullcontext() as client:
                resolution = resolve_call(store, key, client=client, **decision)
        except InvalidTransitionError as error:
            raise CommandError(EXIT_ATTENTION, str(error)) from None
        except StoreError:
            raise
        except APIStatusError as error:
            already = error.status_code == 409
            raise CommandError(
                EXIT_ATTENTION,
                f"the server did not take the answer to call {key.call_id}: {error.message}"
                + (
                    " (it already holds a result, or the Turn cannot take one)"
                    if already
                    else " (its Turn may have ended)"
                )
                + "; nothing changed",
            ) from None
        except ValueError as error:
            # The message names the option without its dashes: "output cannot be sent".
            parser.error(f"--{error}")
    finally:
        store.close()
    settled, how = resolution.record, resolution.settled_by
    if args.json:
        _print_json(
            {
                "session_id": key.session_id,
                "turn_id": key.turn_id,
                "call_id": key.call_id,
                "settled_by": how,
                "record": _record_json(settled, in_doubt=settled.state is CallState.IN_DOUBT),
            }
        )
    elif resolution.action == "answered":
        _say(
            f"Call {key.call_id} answered ({how}): the server took the result; the record "
            "keeps the one it refused"
        )
    elif resolution.action == "cleared_to_rerun":
        _say(
            f"Call {key.call_id} cleared to run again: the next runner serving Session "
            f"{key.session_id} runs it again (its record keeps the history)"
        )
    else:
        _say(
            f"Call {key.call_id} settled ({how}): the next serve or `openagentcore recover "
            f"{key.session_id}` submits the result"
        )
    return EXIT_OK


#: The longest id the CLI sends in a URL (the server's ids are far shorter).
_MAX_ID_LENGTH = 1024


def _text(text: str) -> str:
    """Command-line text that can be sent or looked up: Python hands bytes that are not
    UTF-8 over as lone surrogates, which nothing can encode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not valid UTF-8 (check the terminal's encoding)"
        ) from None
    return text


def _session_id(text: str) -> str:
    """A Session id the client can put in a URL, checked before anything is sent."""
    from .resources._base import path

    _text(text)
    if len(text) > _MAX_ID_LENGTH:
        raise argparse.ArgumentTypeError(f"an id of {len(text)} characters is too long")
    try:
        path("{id}", id=text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error).replace("`id`", "the Session id")) from None
    return text


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(
            f"{port} is not a port: use 1 to 65535, or 0 for a free one"
        )
    return port


def _seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got {text!r}")
    return seconds


def _age(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    number, unit = (text[:-1], text[-1]) if text[-1:] in units else (text, "s")
    try:
        seconds = float(number) * units[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not an age: {text!r} (try 3600, 90m, 12h or 7d)"
        ) from None
    if not seconds >= 0:  # NaN too
        raise argparse.ArgumentTypeError(f"not an age: {text!r} (it must be 0 or more)")
    return seconds


#: The youngest records ``calls prune`` deletes without ``--force``. A record is what
#: stops a runner acting on a Session read from before the result was accepted (the
#: call still listed) from running the call again; such a read is seconds old, not hours.
MIN_PRUNE_AGE = 3600.0


def _run_calls_prune(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.older_than < MIN_PRUNE_AGE and not args.force:
        parser.error(
            f"--older-than {args.older_than:g}s is under an hour: a runner still serving "
            "the Session may act on a read taken before the result was accepted and, with "
            "the record gone, run the call again. Use an age of 1h or more, or add --force "
            "when no runner is serving"
        )
    store = _open(args, parser)
    try:
        removed = store.prune(older_than=args.older_than)
    finally:
        store.close()
    _say(f"Removed {removed} finished call(s)")
    return EXIT_OK


def _client() -> Client:
    """The client of commands that talk to the server, its base URL checked first: one
    without a scheme would otherwise be retried for seconds as an unreachable server."""
    from . import Client

    client = Client()
    if client.base_url.scheme not in ("http", "https"):
        client.close()
        # Not quoted: a URL without a scheme can put a password where a path would be.
        raise CommandError(
            EXIT_CONFIG,
            "OPENAGENTCORE_BASE_URL does not start with http:// or https://; set it to "
            "the API root, e.g. http://127.0.0.1:8080/v1",
        )
    return client


def _run_pending(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from .store import CallKey
    from .types import FunctionCallAction

    store = _open(args, parser) if args.store else None
    actions: list[dict[str, object]] = []
    try:
        with _client() as client:
            session = client.sessions.retrieve(args.session_id)
        for action in session.required_actions:
            if not isinstance(action, FunctionCallAction):
                actions.append({"type": action.type})
                continue
            entry: dict[str, object] = {
                "type": action.type,
                "name": action.name,
                "turn_id": action.turn_id,
                "call_id": action.call_id,
                "saved_result": None,
                "state": None,
            }
            if store is not None:
                record = store.get(CallKey(session.id, action.turn_id, action.call_id))
                if record is not None:
                    entry["saved_result"] = record.has_result()
                    entry["state"] = record.state.value
            actions.append(entry)
    finally:
        if store is not None:
            store.close()
    if args.json:
        _print_json(
            {
                "session_id": session.id,
                "status": session.status,
                "store": store is not None,
                "required_actions": actions,
            }
        )
        return EXIT_OK
    _say(f"Session {session.id}: {session.status}")
    for entry in actions:
        if "call_id" not in entry:
            _say(f"  {entry['type']} (not a function call)")
            continue
        if store is None:
            saved = "store not given"
        elif entry["state"] is None:
            saved = "not in the store"
        elif entry["saved_result"]:
            saved = f"saved result ({entry['state']})"
        else:
            saved = f"no saved result ({entry['state']})"
        where = f"turn {entry['turn_id']} call {entry['call_id']}"
        _say(f"  function_call {entry['name']} {where}: {saved}")
    if not actions:
        _say("  nothing pending")
    return EXIT_OK


def _report_json(report: object) -> dict[str, object]:
    """Every field of a ``ServeReport``; call keys become objects."""
    from .store import CallKey

    def plain(value: object) -> object:
        if isinstance(value, CallKey):
            return {
                "session_id": value.session_id,
                "turn_id": value.turn_id,
                "call_id": value.call_id,
            }
        if isinstance(value, list):
            return [plain(item) for item in value]
        return value

    assert dataclasses.is_dataclass(report)
    return {field.name: plain(getattr(report, field.name)) for field in dataclasses.fields(report)}


def _run_recover(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from . import FunctionRunner

    store = _open(args, parser)
    with _client() as client:
        # It runs no function: what is left when a pass ends is a resubmission the server
        # refused or failed, which the next pass sends again; no need to wait for it.
        runner = FunctionRunner(
            client,
            store=store,
            max_concurrency=1,
            shutdown_grace=1.0,
            unreachable_timeout=args.give_up_after,
        )
        try:
            if args.agent is not None:
                return _recover_agent(args, client, runner)
            report = runner.recover(args.session_id)
        finally:
            runner.close()
    code = EXIT_ATTENTION if _needs_a_person(report) else EXIT_OK
    if args.json:
        _print_json(_report_json(report))
        return code
    _print_report(report)
    return code


def _needs_a_person(report: ServeReport) -> bool:
    """Calls left pending without a saved result wait for a runner; calls in doubt wait
    for a runner that knows the function, or for a person to settle them."""
    return bool(report.in_doubt or report.conflicts or report.rejected or report.store_errors)


def _recover_agent(args: argparse.Namespace, client: Client, runner: FunctionRunner) -> int:
    """Recover every Session of an Agent; on a terminal, stderr shows the progress."""
    from .runner import RunnerError

    progress = _Progress(sys.stderr)
    reports: list[dict[str, object]] = []
    attention = False
    for index, session in enumerate(client.sessions.list(agent_id=args.agent), start=1):
        progress.show(f"recovering Session {index} ({session.id})")
        try:
            report = runner.recover(session.id)
        except RunnerError as error:  # deleted meanwhile: say so and go on
            attention = True
            reports.append({"session_id": session.id, "error": str(error)})
            if not args.json:
                progress.clear()
                _say(f"Session {session.id}: {error}")
            continue
        attention = attention or _needs_a_person(report)
        reports.append(_report_json(report))
        if not args.json:
            progress.clear()
            _print_report(report)
    progress.clear()
    if args.json:
        _print_json({"agent_id": args.agent, "sessions": reports})
    else:
        _say(f"Agent {args.agent}: {len(reports)} Session(s) recovered")
    return EXIT_ATTENTION if attention else EXIT_OK


class _Progress:
    """One line rewritten in place, only when ``stream`` is a terminal."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._on = bool(getattr(stream, "isatty", lambda: False)())
        self._width = 0

    def show(self, text: str) -> None:
        if self._on:
            self._stream.write("\r" + text.ljust(self._width))
            self._stream.flush()
            self._width = len(text)

    def clear(self) -> None:
        if self._on and self._width:
            self._stream.write("\r" + " " * self._width + "\r")
            self._stream.flush()
            self._width = 0


def _print_report(report: ServeReport) -> None:
    session_id = report.session_id
    _say(f"Session {session_id}: {report.results_resubmitted} saved result(s) resubmitted")
    for key in report.in_doubt:
        _say(
            f"  in doubt: call {key.call_id} (turn {key.turn_id}); run your runner to resolve "
            f"it, or settle it by hand with `openagentcore calls resolve {key.call_id}`"
        )
    for key in report.left_pending:
        _say(f"  pending without a saved result: call {key.call_id} (turn {key.turn_id})")
    for key in report.conflicts:
        _say(f"  conflict: the server holds a different result for call {key.call_id}")
    for key in report.rejected:
        _say(
            f"  refused: the server did not accept the saved result for call {key.call_id}; "
            f"answer it with `openagentcore calls resolve {key.call_id} --failed MESSAGE`"
        )
    if report.store_errors:
        _say(
            f"  the result store was unreachable {report.store_errors} time(s), so some calls "
            "may not have been looked at; run recover again once it is back"
        )


if __name__ == "__main__":
    sys.exit(main())
