"""The ``openagentcore dev`` command, ``python -m openagentcore.local`` and the pytest plugin."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

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
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert fragment in capsys.readouterr().err


PLUGIN_USER_TESTS = """
import httpx
import pytest

def test_local_core(local_core):
    headers = {"Authorization": f"Bearer {local_core.api_key}", "OpenAI-Beta": "agents=v1"}
    assert httpx.get(f"{local_core.base_url}/agents", headers=headers).status_code == 200
    assert local_core.api_key not in repr(local_core)

def test_client(client, local_core):
    assert str(client.base_url).rstrip("/") == local_core.base_url
    assert client.agents.create(model="m").id.startswith("agent_")

@pytest.mark.anyio
async def test_async_client(async_client, local_core):
    assert str(async_client.base_url).rstrip("/") == local_core.base_url

@pytest.fixture
def anyio_backend():
    return "asyncio"
"""


def test_pytest_plugin_fixtures(tmp_path: Path) -> None:
    """A user's test suite gets the fixtures from the installed pytest11 entry point."""
    (tmp_path / "test_user.py").write_text(PLUGIN_USER_TESTS, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 passed" in result.stdout
