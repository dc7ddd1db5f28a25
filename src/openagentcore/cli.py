"""The ``openagentcore`` command.

Each subcommand registers its parser in :func:`build_parser` and sets ``handler`` to a
function taking the parsed arguments and returning the exit code.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="openagentcore", description=__doc__.splitlines()[0])
    subcommands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_dev(subcommands)
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
        help="turn on a fault, e.g. duplicate_every=3; repeatable",
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


if __name__ == "__main__":
    sys.exit(main())
