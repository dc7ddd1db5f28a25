"""Expected failures: one line on stderr, a documented exit code, no traceback.

Each case is something a person types by mistake or meets in production (issue 15):
an unknown Session, no API key, a store path with a typo, a server that is down.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import openagentcore
from openagentcore import Client, SQLiteResultStore
from openagentcore.cli import (
    EXIT_ATTENTION,
    EXIT_CONFIG,
    EXIT_NOT_FOUND,
    EXIT_STORE,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    main,
)
from openagentcore.store import StoreUnavailableError
from openagentcore.types import FunctionCallAction

from ._support import save_result

Setup = tuple[Client, str, FunctionCallAction, Path]


def _fails_with(
    argv: list[str], code: int, capsys: pytest.CaptureFixture[str], *fragments: str
) -> str:
    assert main(argv) == code
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert "Traceback" not in captured.err
    for fragment in fragments:
        assert fragment in lines[0]
    return lines[0]


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.mark.parametrize("command", ["pending", "recover"])
def test_an_unknown_session(command: str, setup: Setup, capsys: pytest.CaptureFixture[str]) -> None:
    _, _, _, store_path = setup
    SQLiteResultStore(store_path).close()
    _fails_with(
        [command, "sess_nope", "--store", str(store_path)],
        EXIT_NOT_FOUND,
        capsys,
        f"openagentcore {command}:",
        "sess_nope",
    )


def test_no_api_key(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("OPENAGENTCORE_API_KEY", raising=False)
    monkeypatch.setenv("OPENAGENTCORE_BASE_URL", "http://127.0.0.1:1/v1")
    _fails_with(["pending", "sess_1"], EXIT_CONFIG, capsys, "OPENAGENTCORE_API_KEY")


def test_a_wrong_api_key(
    setup: Setup, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _, session_id, _, _ = setup
    monkeypatch.setenv("OPENAGENTCORE_API_KEY", "sk-wrong-key")
    line = _fails_with(["pending", session_id], EXIT_CONFIG, capsys, "OPENAGENTCORE_API_KEY")
    assert "sk-wrong-key" not in line


def test_an_unreachable_server_is_named_without_credentials(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    port = _closed_port()
    monkeypatch.setenv("OPENAGENTCORE_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAGENTCORE_BASE_URL", f"http://user:hunter2@127.0.0.1:{port}/v1")
    line = _fails_with(
        ["pending", "sess_1"], EXIT_UNREACHABLE, capsys, f"http://127.0.0.1:{port}/v1"
    )
    assert "hunter2" not in line


def test_a_store_in_a_missing_directory(
    setup: Setup, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, session_id, _, _ = setup
    missing = tmp_path / "no" / "such" / "dir" / "calls.db"
    _fails_with(["recover", session_id, "--store", str(missing)], EXIT_STORE, capsys, str(missing))


@pytest.mark.parametrize(
    "argv",
    [
        ["calls", "list"],
        ["calls", "show", "call_1"],
        ["calls", "prune", "--older-than", "1d"],
        ["pending", "SESSION"],
        ["recover", "SESSION"],
    ],
)
def test_read_commands_never_create_a_store(
    argv: list[str], setup: Setup, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A typo in ``--store`` used to create an empty database and answer "0 call(s)"."""
    _, session_id, _, _ = setup
    typo = tmp_path / "typo.db"
    argv = [session_id if arg == "SESSION" else arg for arg in argv]
    _fails_with([*argv, "--store", str(typo)], EXIT_STORE, capsys, "does not exist")
    assert list(tmp_path.iterdir()) == []


def test_a_file_that_is_not_a_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    not_a_database = tmp_path / "notes.txt"
    not_a_database.write_text("these are not the calls you are looking for\n" * 100)
    _fails_with(["calls", "list", "--store", str(not_a_database)], EXIT_STORE, capsys)


def test_a_store_that_fails_while_reading(
    setup: Setup, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _, session_id, action, store_path = setup
    save_result(store_path, session_id, action)

    def locked(self: SQLiteResultStore, **filters: object) -> None:
        raise StoreUnavailableError("database is locked")

    monkeypatch.setattr(SQLiteResultStore, "find", locked)
    _fails_with(
        ["calls", "list", "--store", str(store_path)], EXIT_STORE, capsys, "database is locked"
    )


def test_debug_shows_the_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("OPENAGENTCORE_API_KEY", raising=False)
    monkeypatch.setenv("OPENAGENTCORE_BASE_URL", "http://127.0.0.1:1/v1")
    with pytest.raises(openagentcore.OpenAgentCoreError, match="No API key"):
        main(["--debug", "pending", "sess_1"])
    with pytest.raises(openagentcore.OpenAgentCoreError, match="No API key"):
        main(["pending", "sess_1", "--debug"])


def test_calls_show_of_an_unknown_call(setup: Setup, capsys: pytest.CaptureFixture[str]) -> None:
    _, session_id, action, store_path = setup
    save_result(store_path, session_id, action)
    _fails_with(
        ["calls", "show", "call_missing", "--store", str(store_path)],
        EXIT_ATTENTION,
        capsys,
        "No call call_missing",
    )


def test_schema_and_table_need_a_postgres_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    SQLiteResultStore(tmp_path / "calls.db").close()
    with pytest.raises(SystemExit) as exit_info:
        main(["calls", "list", "--store", str(tmp_path / "calls.db"), "--table", "calls"])
    assert exit_info.value.code == EXIT_USAGE
    assert "postgresql://" in capsys.readouterr().err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"openagentcore {openagentcore.__version__}"


def test_the_installed_command_prints_one_line(tmp_path: Path) -> None:
    """The console script, as a person runs it: no Python frames on the terminal."""
    env = {k: v for k, v in os.environ.items() if k != "OPENAGENTCORE_API_KEY"}
    env["OPENAGENTCORE_BASE_URL"] = "http://127.0.0.1:1/v1"
    result = subprocess.run(
        [sys.executable, "-m", "openagentcore.cli", "pending", "sess_1"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert result.returncode == EXIT_CONFIG
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("openagentcore pending: No API key")
