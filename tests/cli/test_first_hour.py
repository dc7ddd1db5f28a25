"""A person's first hour with the CLI (issue 24): the mistakes they make starting the
emulator, and the quickstart's next step. Each is one line naming the fix, with the exit
code docs/reference/cli.md gives it, from the command run as a person runs it."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from openagentcore.cli import EXIT_OK, EXIT_USAGE

from ._support import SOURCES, one_line, run_cli

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A loopback port another program listens on."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


def test_dev_on_a_port_in_use_says_to_choose_another(busy_port: int) -> None:
    done = run_cli("dev", "--port", str(busy_port))

    line = one_line(done)
    assert done.returncode == EXIT_USAGE, done.stderr
    assert f"127.0.0.1:{busy_port}" in line
    assert "in use" in line
    assert "--port 0" in line


def test_dev_on_a_port_out_of_range_is_a_bad_command_line() -> None:
    done = run_cli("dev", "--port", "99999")

    line = one_line(done)
    assert done.returncode == EXIT_USAGE, done.stderr
    assert "--port" in line
    assert "65535" in line


def test_dev_on_an_address_of_another_machine_says_to_change_host() -> None:
    # 192.0.2.0/24 is reserved for documentation: no interface of this machine has it.
    done = run_cli("dev", "--host", "192.0.2.1")

    line = one_line(done)
    assert done.returncode == EXIT_USAGE, done.stderr
    assert "192.0.2.1" in line
    assert "--host 127.0.0.1" in line


@pytest.mark.parametrize(
    ("name", "text", "where"),
    [
        ("broken.yaml", "turns:\n  - : [\n", "line 2"),
        ("broken.json", '{"turns": [\n', "line 2"),
        ("wrong.json", '{"turns": 5}', "'turns' must be a list"),
    ],
)
def test_dev_with_a_scenario_file_that_does_not_parse_names_the_file_and_the_place(
    tmp_path: Path, name: str, text: str, where: str
) -> None:
    scenario = tmp_path / name
    scenario.write_text(text, encoding="utf-8")

    done = run_cli("dev", "--scenario", str(scenario))

    line = one_line(done)
    assert done.returncode == EXIT_USAGE, done.stderr
    assert str(scenario) in line
    assert where in line
    assert "fix the --scenario file" in line


def test_dev_with_a_state_file_that_is_not_one_names_the_option(tmp_path: Path) -> None:
    state = tmp_path / "notes.txt"
    state.write_text("shopping list\n", encoding="utf-8")

    done = run_cli("dev", "--state", str(state))

    line = one_line(done)
    assert done.returncode == EXIT_USAGE, done.stderr
    assert f"--state {state}" in line
    assert "--store" not in line


def _readme_next_step() -> list[str]:
    """The command README.md gives right after the quickstart, as words."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    after = readme.split("examples/quickstart.py", 1)[1]
    command = re.search(r"^((?:\S*/)?openagentcore calls list[^\n#]*)", after, re.M)
    assert command is not None, "README.md gives no `openagentcore calls list` after the quickstart"
    return command.group(1).split()


def test_the_readme_next_step_finds_the_calls_the_quickstart_made(tmp_path: Path) -> None:
    """The quickstart prints where it saved its results; the README's next step, run
    verbatim in the same directory, lists them."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAGENTCORE_")}
    env["PYTHONPATH"] = str(SOURCES)
    example = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        timeout=120,
        check=False,
    )
    assert example.returncode == 0, example.stderr
    saved = re.search(r"results saved in (\S+)", example.stdout)
    assert saved is not None, example.stdout
    assert (tmp_path / saved.group(1)).is_file(), example.stdout

    words = _readme_next_step()
    assert words[0].endswith("openagentcore")
    done = run_cli(*words[1:], env=env, cwd=tmp_path)

    assert done.returncode == EXIT_OK, done.stderr
    assert "3 call(s)" in done.stdout, done.stdout
    for function in ("lookup_ticket", "search_docs", "escalate"):
        assert function in done.stdout
