"""The ``openagentcore dev`` command and ``python -m openagentcore.local``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import httpx
import pytest

from openagentcore.cli import main


def test_module_entry_point_serves_and_prints_the_url_and_key() -> None:
    command = [
        sys.executable,
        "-m",
        "openagentcore.local",
        "--api-key",
        "sk-cli",
        "--fault",
        "duplicate_every=2",
    ]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"}
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        second = process.stdout.readline()
        base_url = first.rsplit(" ", 1)[-1].strip()
        assert base_url.startswith("http://127.0.0.1:")
        assert base_url.endswith("/v1")
        assert second.strip() == "API key: sk-cli"
        headers = {"Authorization": "Bearer sk-cli", "OpenAI-Beta": "agents=v1"}
        response = httpx.post(f"{base_url}/agents", json={"model": "m"}, headers=headers)
        assert response.status_code == 201
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=10) == 0


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["dev", "--fault", "nope=1"], "NAME=VALUE"),
        (["dev", "--scenario", "/nonexistent/scenario.yaml"], "No such file"),
        ([], "COMMAND"),
    ],
)
def test_dev_rejects_bad_arguments(
    argv: list[str], fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        code = main(argv)
    except SystemExit as exited:  # argparse's own check of the command line
        code = int(exited.code or 0)
    assert code == 2
    assert fragment in capsys.readouterr().err
