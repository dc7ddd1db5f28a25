"""Every exit code docs/reference/cli.md documents is what the command gives for the
case the table names, and for no other case here (issue 24). The table is read from
the doc, so the doc and these cases cannot drift apart. Each case runs the command in
a process of its own, as a person does."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import sqlite3
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from starlette.responses import Response

from openagentcore import Client, SQLiteResultStore
from openagentcore.store import CallKey
from openagentcore.types import FunctionCallAction

from ._odd_server import OddProxy, api_error, is_session_read
from ._support import cli_command, cli_environment, one_line, run_cli

ROOT = Path(__file__).resolve().parents[2]
Setup = tuple[Client, str, FunctionCallAction, Path]


def documented_exit_codes() -> dict[int, str]:
    """The rows of the exit-code table in docs/reference/cli.md: code -> meaning."""
    text = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    section = text.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (\d+) \| (.+?) \|$", section, re.M)
    assert rows, "no exit-code table in docs/reference/cli.md"
    return {int(code): meaning for code, meaning in rows}


@dataclass
class World:
    """What a case may use: the emulator's Session waiting on one call, a store file
    that exists, and a scratch directory."""

    session_id: str
    action: FunctionCallAction
    store: Path
    tmp: Path

    @property
    def base_url(self) -> str:
        return os.environ["OPENAGENTCORE_BASE_URL"]

    def env(self, **changes: str | None) -> dict[str, str]:
        env = dict(os.environ)
        for name, value in changes.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
        return env


@pytest.fixture
def world(setup: Setup) -> World:
    _, session_id, action, store_path = setup
    SQLiteResultStore(store_path).close()
    return World(session_id, action, store_path, store_path.parent)


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def _through_proxy(world: World, answer: Response, *argv: str) -> subprocess.CompletedProcess[str]:
    """``argv`` against a proxy that gives ``answer`` to every Session read."""
    proxy = OddProxy(world.base_url).start()
    proxy.rule = lambda method, path, body: answer if is_session_read(method, path) else None
    try:
        return run_cli(*argv, env=world.env(OPENAGENTCORE_BASE_URL=proxy.base_url))
    finally:
        proxy.stop()


# -- the cases, by the code the table gives them ------------------------------------------


def success(world: World) -> subprocess.CompletedProcess[str]:
    return run_cli("calls", "list", "--store", str(world.store))


def recover_leaves_a_call_in_doubt(world: World) -> subprocess.CompletedProcess[str]:
    with SQLiteResultStore(world.store) as store:
        key = CallKey(world.session_id, world.action.turn_id, world.action.call_id)
        store.claim(
            key, function_name="refund", arguments_hash="h", owner="gone:1:a", lease_seconds=0.01
        )
    # The lease runs out at once; recover judges it by the store's own clock.
    return run_cli("recover", world.session_id, "--store", str(world.store))


def show_a_call_not_in_the_store(world: World) -> subprocess.CompletedProcess[str]:
    return run_cli("calls", "show", "call_nope", "--store", str(world.store))


def no_store_option(world: World) -> subprocess.CompletedProcess[str]:
    return run_cli("calls", "list")


def dev_port_out_of_range(world: World) -> subprocess.CompletedProcess[str]:
    return run_cli("dev", "--port", "99999")


def dev_port_in_use(world: World) -> subprocess.CompletedProcess[str]:
    port = world.base_url.split(":")[-1].split("/")[0]  # the emulator holds it
    return run_cli("dev", "--port", port)


def dev_scenario_that_does_not_parse(world: World) -> subprocess.CompletedProcess[str]:
    scenario = world.tmp / "scenario.yaml"
    scenario.write_text("turns:\n  - : [\n", encoding="utf-8")
    return run_cli("dev", "--scenario", str(scenario))


def no_api_key(world: World) -> subprocess.CompletedProcess[str]:
    return run_cli("pending", world.session_id, env=world.env(OPENAGENTCORE_API_KEY=None))


def a_wrong_api_key(world: World) -> subprocess.CompletedProcess[str]:
    return run_cli("pending", world.session_id, env=world.env(OPENAGENTCORE_API_KEY="sk-wrong"))


def a_base_url_without_a_scheme(world: World) -> subprocess.CompletedProcess[str]:
    url = world.base_url.removeprefix("http://")
    return run_cli("pending", world.session_id, env=world.env(OPENAGENTCORE_BASE_URL=url))


def psycopg_not_installed(world: World) -> subprocess.CompletedProcess[str]:
    # A None entry in sys.modules makes `import psycopg` fail as if it were not installed.
    store = "postgresql://postgres@127.0.0.1:5432/test"
    return run_cli(
        "calls", "list", "--store", store, prelude="import sys; sys.modules['psycopg'] = None"
    )


def an_unknown_session(world: World) -> subprocess.CompletedProcess[str]:
    return run_cli("pending", "sess_nope")


def an_unreachable_server(world: World) -> subprocess.CompletedProcess[str]:
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    return run_cli("pending", world.session_id, env=world.env(OPENAGENTCORE_BASE_URL=url))


def a_session_read_that_is_not_json(world: World) -> subprocess.CompletedProcess[str]:
    page = Response("<html>Welcome</html>", status_code=200, media_type="text/html")
    return _through_proxy(world, page, "pending", world.session_id)


def a_store_that_does_not_exist(world: World) -> subprocess.CompletedProcess[str]:
    return run_cli("calls", "list", "--store", str(world.tmp / "typo.db"))


def a_store_path_naming_a_text_file(world: World) -> subprocess.CompletedProcess[str]:
    notes = world.tmp / "notes.txt"
    notes.write_text("not a database\n", encoding="utf-8")
    return run_cli("calls", "list", "--store", str(notes))


def a_store_path_naming_another_database(world: World) -> subprocess.CompletedProcess[str]:
    other = world.tmp / "app.sqlite"
    with contextlib.closing(sqlite3.connect(other)) as connection:
        connection.execute("CREATE TABLE users (name TEXT)")
        connection.commit()
    done = run_cli("calls", "list", "--store", str(other))
    with contextlib.closing(sqlite3.connect(other)) as connection:
        tables = connection.execute("SELECT name FROM sqlite_master").fetchall()
    assert tables == [("users",)], "the command added a table to another program's database"
    return done


def the_server_refuses_otherwise(world: World) -> subprocess.CompletedProcess[str]:
    refusal = api_error(422, "invalid_request", "no such thing")
    return _through_proxy(world, refusal, "pending", world.session_id)


def a_bug(world: World) -> subprocess.CompletedProcess[str]:
    # No known input reaches it: a defect is planted in the process to see the path.
    planted = (
        "import openagentcore.cli as cli\n"
        "def _defect(*args, **kwargs):\n"
        "    raise RuntimeError('planted defect')\n"
        "cli._open = _defect"
    )
    return run_cli("calls", "list", "--store", str(world.store), prelude=planted)


def interrupted(world: World) -> subprocess.CompletedProcess[str]:
    """Ctrl-C while waiting on a server that took the connection and never answers."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        silent.settimeout(60)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        process = subprocess.Popen(
            cli_command("pending", world.session_id),
            env=cli_environment(world.env(OPENAGENTCORE_BASE_URL=url)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            connection, _ = silent.accept()  # the request is on its way: it waits now
            with connection:
                process.send_signal(signal.SIGINT)
                out, err = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


Case = Callable[[World], subprocess.CompletedProcess[str]]

#: Code -> the cases that must end with it (what the table's row says).
CASES: dict[int, list[Case]] = {
    0: [success],
    1: [recover_leaves_a_call_in_doubt, show_a_call_not_in_the_store],
    2: [no_store_option, dev_port_out_of_range, dev_port_in_use, dev_scenario_that_does_not_parse],
    3: [no_api_key, a_wrong_api_key, a_base_url_without_a_scheme, psycopg_not_installed],
    4: [an_unknown_session],
    5: [an_unreachable_server, a_session_read_that_is_not_json],
    6: [
        a_store_that_does_not_exist,
        a_store_path_naming_a_text_file,
        a_store_path_naming_another_database,
    ],
    7: [the_server_refuses_otherwise],
    70: [a_bug],
    130: [interrupted],
}

ALL_CASES = [(code, case) for code, cases in CASES.items() for case in cases]

#: Cases the table's row must name in so many words (the row once said only "no API key
#: or base URL" for code 3, and nothing of calls in doubt for code 1).
NAMED_IN_THE_ROW: dict[Case, str] = {
    recover_leaves_a_call_in_doubt: "in doubt",
    a_base_url_without_a_scheme: "http://",
    psycopg_not_installed: "not installed",
    a_session_read_that_is_not_json: "not JSON",
    a_store_path_naming_a_text_file: "not a result store",
    dev_scenario_that_does_not_parse: "--scenario",
    a_bug: "Reserved for bugs",
}

#: What the one line must say for cases where the code alone was right before.
NAMED_IN_THE_LINE: dict[Case, str] = {
    a_store_path_naming_a_text_file: "is not a result store",
    a_store_path_naming_another_database: "is not a result store",
    psycopg_not_installed: "pip install 'openagentcore[postgres]'",
    a_base_url_without_a_scheme: "http://",
    dev_scenario_that_does_not_parse: "line 2",
}


@pytest.mark.parametrize(
    ("code", "meaning"), sorted(documented_exit_codes().items()), ids=lambda value: str(value)[:12]
)
def test_every_documented_code_has_the_cases_its_row_names(code: int, meaning: str) -> None:
    assert CASES.get(code), f"exit code {code} ({meaning}) is reached by no case here"


def test_no_case_expects_a_code_the_doc_does_not_give() -> None:
    assert set(CASES) <= set(documented_exit_codes())


@pytest.mark.parametrize(
    ("case", "words"), NAMED_IN_THE_ROW.items(), ids=[c.__name__ for c in NAMED_IN_THE_ROW]
)
def test_the_row_of_a_case_names_it(case: Case, words: str) -> None:
    (code,) = [code for code, cases in CASES.items() if case in cases]
    assert words in documented_exit_codes()[code]


@pytest.mark.parametrize(
    ("code", "case"), ALL_CASES, ids=[f"{code}-{case.__name__}" for code, case in ALL_CASES]
)
def test_each_case_ends_with_its_code_and_no_other(code: int, case: Case, world: World) -> None:
    done = case(world)

    assert done.returncode == code, (done.returncode, done.stderr)
    if code == 0:
        return
    if code == 1:  # the command's own output says what needs a person
        assert "This is a bug" not in done.stderr
        return
    if code == 70:
        assert "This is a bug in openagentcore" in done.stderr
        return
    line = one_line(done)
    assert line.startswith("openagentcore")
    assert NAMED_IN_THE_LINE.get(case, "") in line
    assert "damaged" not in line


def test_recover_against_a_server_that_is_down_says_so_once_in_one_line(world: World) -> None:
    """The runner logs each failed read; without OPENAGENTCORE_LOG those lines used to
    reach stderr through Python's last-resort handler, and the last line nested the
    runner's advice inside the CLI's."""
    url = f"http://127.0.0.1:{_closed_port()}/v1"

    done = run_cli(
        "recover",
        world.session_id,
        "--store",
        str(world.store),
        "--give-up-after",
        "1",
        env=world.env(OPENAGENTCORE_BASE_URL=url),
    )

    assert done.returncode == 5, done.stderr
    line = one_line(done)
    assert line.count("check") == 1, line
    assert line.lower().count("reach") == 1, line


def test_an_unknown_log_level_is_named_with_the_accepted_ones(world: World) -> None:
    done = run_cli(
        "calls", "list", "--store", str(world.store), env=world.env(OPENAGENTCORE_LOG="verbose")
    )

    assert done.returncode == 0, done.stderr
    line = one_line(done)
    assert "OPENAGENTCORE_LOG='verbose'" in line
    assert "debug, info, warning" in line


def test_a_log_level_asked_for_shows_the_runner_log(world: World) -> None:
    """Quiet by default is not deaf: OPENAGENTCORE_LOG still shows why recover failed."""
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    argv = ["recover", world.session_id, "--store", str(world.store), "--give-up-after", "1"]

    done = run_cli(*argv, env=world.env(OPENAGENTCORE_BASE_URL=url, OPENAGENTCORE_LOG="warning"))

    assert done.returncode == 5, done.stderr
    assert "Could not read Session" in done.stderr
