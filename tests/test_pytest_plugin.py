"""The pytest plugin, as a user's test suite sees it: run in a pytest of its own."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

USER_TESTS = '''
import httpx
import pytest

from openagentcore.local import Faults
from openagentcore.types import MessageItem

def test_local_core(oac_local_core):
    headers = {"Authorization": f"Bearer {oac_local_core.api_key}", "OpenAI-Beta": "agents=v1"}
    response = httpx.get(f"{oac_local_core.base_url}/agents", headers=headers)
    assert response.status_code == 200
    assert oac_local_core.api_key not in repr(oac_local_core)

def test_client(oac_client, oac_local_core):
    assert str(oac_client.base_url).rstrip("/") == oac_local_core.base_url
    assert oac_client.agents.create(model="m").id.startswith("agent_")

@pytest.mark.anyio
async def test_async_client(oac_async_client, oac_local_core):
    assert str(oac_async_client.base_url).rstrip("/") == oac_local_core.base_url
    assert (await oac_async_client.agents.create(model="m")).id.startswith("agent_")

@pytest.mark.oac_faults(duplicate_every=2, retry_after=0)
def test_faults_marker(oac_local_core):
    assert oac_local_core.faults == Faults(duplicate_every=2, retry_after=0)

@pytest.mark.oac_faults(Faults(close_stream_after=7))
def test_faults_marker_with_a_value(oac_local_core):
    assert oac_local_core.faults.close_stream_after == 7

SCENARIO = {
    "turns": [
        {"steps": [[{"name": "add", "arguments": {"a": 2, "b": 3}}]], "answer": "sum={add}"}
    ]
}

@pytest.mark.oac_scenario(SCENARIO)
def test_runner_serves_a_scripted_turn(oac_runner, oac_client):
    seen = []

    @oac_runner.function
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        seen.append((a, b))
        return a + b

    session = oac_client.sessions.create(
        agent={"model": "scripted", "tools": oac_runner.tools}, input="add them"
    )
    report = oac_runner.serve(session.id, timeout=30)
    assert seen == [(2, 3)]
    assert report.calls_run == 1
    answers = [
        item.output_text
        for item in oac_client.sessions.items.list(session.id, order="asc")
        if isinstance(item, MessageItem) and item.role == "assistant"
    ]
    assert answers == ["sum=5"]
    records = oac_runner.store.find(session_id=session.id)
    assert [record.function_name for record in records] == ["add"]

@pytest.mark.oac_scenario(SCENARIO)
@pytest.mark.anyio
async def test_async_runner_serves_a_scripted_turn(oac_async_runner, oac_async_client):
    @oac_async_runner.function
    async def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    session = await oac_async_client.sessions.create(
        agent={"model": "scripted", "tools": oac_async_runner.tools}, input="add them"
    )
    report = await oac_async_runner.serve(session.id, timeout=30)
    assert report.calls_run == 1

def test_client_is_left_to_pytest_django(client):
    raise AssertionError("pytest-django's client needs Django, which is not installed")

@pytest.fixture
def anyio_backend():
    return "asyncio"
'''


def _run_user_suite(directory: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *options],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_fixtures_and_markers_next_to_pytest_django(tmp_path: Path) -> None:
    """With pytest-django loaded, ``client`` is Django's and ours are all prefixed.

    Before the prefix, the plugin's own ``client`` and pytest-django's fought over the
    name (whichever plugin registered last won). pytest-django's ``client`` skips the
    test when Django is not installed, which shows whose fixture the test got.
    """
    pytest.importorskip("pytest_django")
    (tmp_path / "test_user.py").write_text(USER_TESTS, encoding="utf-8")
    result = _run_user_suite(tmp_path, "--strict-markers")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "7 passed, 1 skipped" in result.stdout, output
    assert "no Django settings" in result.stdout, output  # pytest-django's own skip


def test_the_plugin_registers_no_unprefixed_fixture(tmp_path: Path) -> None:
    """Every fixture the plugin adds starts with ``oac_``, so none can shadow another's."""
    (tmp_path / "test_nothing.py").write_text("def test_nothing():\n    pass\n", "utf-8")
    result = _run_user_suite(tmp_path, "--fixtures", "-p", "no:django", "-v")
    assert result.returncode == 0, result.stdout + result.stderr
    names = re.findall(r"^(\w+) -- .*openagentcore/pytest_plugin\.py", result.stdout, re.M)
    assert "oac_client" in names, result.stdout
    assert [name for name in names if not name.startswith("oac_")] == []


def test_a_bad_marker_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "test_bad.py").write_text(
        "import pytest\n\n"
        "@pytest.mark.oac_faults(no_such_fault=1)\n"
        "def test_bad(oac_local_core):\n    pass\n",
        "utf-8",
    )
    result = _run_user_suite(tmp_path)
    assert result.returncode != 0
    assert "@pytest.mark.oac_faults: " in result.stdout + result.stderr
    assert "no_such_fault" in result.stdout + result.stderr
