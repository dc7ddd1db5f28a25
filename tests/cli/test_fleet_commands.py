"""``openagentcore fleet status|adopt|release`` on a real SQLite store file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from openagentcore.cli import EXIT_STORE, main
from openagentcore.store import SQLiteResultStore


def test_adopt_then_release_shows_in_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "calls.db"
    SQLiteResultStore(path).close()
    store = ["--store", str(path)]
    assert main(["fleet", "adopt", "sess_1", "--agent", "agent_1", *store]) == 0
    assert main(["fleet", "status", "--json", *store]) == 0
    status = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert status == {
        "workers": [],
        "sessions": [
            {"session": "sess_1", "agent": "agent_1", "state": "active", "owner": None, "epoch": 0}
        ],
    }
    assert main(["fleet", "release", "sess_1", *store]) == 0
    assert main(["fleet", "status", "--json", *store]) == 0
    (session,) = json.loads(capsys.readouterr().out.splitlines()[-1])["sessions"]
    assert session["epoch"] == 1  # whoever owned it is fenced
    assert main(["fleet", "release", "sess_unknown", *store]) == 1


def test_fleet_commands_never_create_a_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "typo.db"
    assert main(["fleet", "status", "--store", str(missing)]) == EXIT_STORE
    assert "never creates one" in capsys.readouterr().err
    assert not missing.exists()
