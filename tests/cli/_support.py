"""Helpers for the CLI tests: a Session waiting on one call, and a saved result for it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from openagentcore import Client, SQLiteResultStore
from openagentcore.store import CallKey, arguments_hash, new_owner_id
from openagentcore.types import FunctionCallAction

#: This checkout's ``src``, for the CLI started in a process of its own.
SOURCES = Path(__file__).resolve().parents[2] / "src"

TOOL = {
    "type": "function",
    "name": "refund",
    "description": "Refund an order.",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
}


def pending_call(client: Client, session_id: str) -> FunctionCallAction:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        session = client.sessions.retrieve(session_id)
        for action in session.required_actions:
            if isinstance(action, FunctionCallAction):
                return action
        time.sleep(0.02)
    raise AssertionError("the Session never asked for the function call")


def save_result(store_path: Path, session_id: str, action: FunctionCallAction) -> CallKey:
    key = CallKey(session_id, action.turn_id, action.call_id)
    store = SQLiteResultStore(store_path)
    claim = store.claim(
        key,
        function_name=action.name,
        arguments_hash=arguments_hash(action.arguments),
        owner=new_owner_id(),
        lease_seconds=30,
    )
    assert claim.won
    event = {
        "type": "agent.session.input.tool_result",
        "turn_id": key.turn_id,
        "call_id": key.call_id,
        "success": True,
        "output": "refunded",
    }
    store.save_result(key, event, owner=None)
    store.close()
    return key


def cli_command(*argv: str, prelude: str = "") -> list[str]:
    """The command line that runs ``openagentcore ARGV``; ``prelude`` is Python run
    first in that process (to take a package away, say)."""
    if not prelude:
        return [sys.executable, "-m", "openagentcore.cli", *argv]
    code = (
        f"{prelude}\nimport sys\nfrom openagentcore.cli import main\nsys.exit(main(sys.argv[1:]))"
    )
    return [sys.executable, "-c", code, *argv]


def cli_environment(env: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment (or ``env``), with this checkout's sources first."""
    environment = dict(os.environ if env is None else env)
    environment["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(SOURCES), environment.get("PYTHONPATH", "")])
    )
    return environment


def run_cli(
    *argv: str,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    prelude: str = "",
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """``openagentcore ARGV`` in a process of its own, as a person runs it."""
    environment = cli_environment(env)
    return subprocess.run(
        cli_command(*argv, prelude=prelude),
        capture_output=True,
        text=True,
        env=environment,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
        check=False,
    )


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    """The single line a failure prints on stderr (nothing on stdout, no traceback)."""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert "This is a bug" not in done.stderr, done.stderr
    assert "\\n" not in lines[0], lines[0]
    return lines[0]
