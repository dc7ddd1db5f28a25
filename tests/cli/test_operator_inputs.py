"""What an operator types, and what a server or a store answers, must end every CLI
command with one line on stderr and a documented exit code: never "This is a bug"
(exit 70), never a command that hangs without a word, never a store changed for an
answer that says nothing about the result, never a password on the terminal.

Over real loopback HTTP (LocalCore behind a hostile proxy) and real SQLite /
PostgreSQL stores. Each test failed before its fix."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.responses import Response

from openagentcore import Client, SQLiteResultStore
from openagentcore.cli import (
    EXIT_CONFIG,
    EXIT_OK,
    EXIT_STORE,
    EXIT_USAGE,
    main,
)
from openagentcore.store import CallKey, CallState
from openagentcore.types import FunctionCallAction

from ._odd_server import OddProxy, api_error, is_result_post, is_session_read
from ._support import save_result

Setup = tuple[Client, str, FunctionCallAction, Path]

#: The exit code ``main`` gives an exception it did not expect ("This is a bug").
EXIT_BUG = 70
#: How long a command that should answer at once may take before it counts as hung.
PROMPT = 30.0


def _code_of(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exited:  # argparse's usage errors
        return int(exited.code or 0)


def _one_line_failure(code: int, err: str) -> None:
    assert code != EXIT_BUG, err
    assert "This is a bug" not in err
    assert "Traceback" not in err
    assert code != EXIT_OK


@pytest.fixture
def proxy(setup: Setup, monkeypatch: pytest.MonkeyPatch) -> Iterator[OddProxy]:
    """A hostile proxy in front of the ``setup`` LocalCore; the CLI talks to it."""
    odd = OddProxy(os.environ["OPENAGENTCORE_BASE_URL"]).start()
    monkeypatch.setenv("OPENAGENTCORE_BASE_URL", odd.base_url)
    yield odd
    odd.stop()


def _cli_in_a_process(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """The command as a person runs it, in a process of its own, so a hang is a failure
    instead of a stuck test."""
    code = "import sys; from openagentcore.cli import main; sys.exit(main(sys.argv[1:]))"
    try:
        return subprocess.run(
            [sys.executable, "-c", code, *argv],
            capture_output=True,
            text=True,
            env=dict(os.environ),
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as expired:
        err = expired.stderr.decode(errors="replace") if isinstance(expired.stderr, bytes) else ""
        pytest.fail(
            f"`openagentcore {' '.join(argv)}` was still running after {timeout:.0f} s "
            f"(stderr so far: {err[-300:]!r})"
        )


# -- calls prune --------------------------------------------------------------------------


@pytest.mark.parametrize("age", ["nan", "NaN", "nanh", "nanm"])
def test_prune_older_than_nan_is_a_usage_error_not_a_bug(
    age: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``_age`` turns "nan" into a float NaN: ``seconds < 0`` is false, so it passes,
    and ``NaN < MIN_PRUNE_AGE`` is false too, so it even skips the ``--force`` check.
    The store's ``validate_older_than`` then raises ``ValueError`` and the command ends
    with exit 70, "This is a bug in openagentcore", instead of "not an age"."""
    store_path = tmp_path / "calls.db"
    SQLiteResultStore(store_path).close()

    code = _code_of(["calls", "prune", "--older-than", age, "--store", str(store_path)])

    err = capsys.readouterr().err
    _one_line_failure(code, err)
    assert code == EXIT_USAGE, err


# -- environment --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "base_url",
    [
        "http://127.0.0.1:8080/v1\n",  # a trailing newline from a .env file or a secret
        "http://[::1/v1",  # a bracket missing
        "http://127.0.0.1:8o80/v1",  # a typo in the port
    ],
)
def test_a_base_url_that_cannot_be_parsed_is_a_config_error(
    base_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``Client()`` parses ``OPENAGENTCORE_BASE_URL`` with ``httpx.URL``, whose
    ``InvalidURL`` is neither an ``OpenAgentCoreError`` nor anything else ``_explain``
    knows: a typo in the variable ends with exit 70 "This is a bug" instead of exit 3
    naming OPENAGENTCORE_BASE_URL."""
    monkeypatch.setenv("OPENAGENTCORE_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAGENTCORE_BASE_URL", base_url)

    code = _code_of(["pending", "sess_1"])

    err = capsys.readouterr().err
    _one_line_failure(code, err)
    assert code == EXIT_CONFIG, err
    assert "OPENAGENTCORE_BASE_URL" in err


# -- odd ids an operator types ------------------------------------------------------------

ODD_SESSION_IDS = {
    "empty": "",  # `pending "$SESSION"` with the variable unset
    "slash": "sess/1",
    "dot-dot": "..",
    "undecodable": "sess_\udcff",  # a byte that is not UTF-8, as Python hands it over
    "huge": "s" * 70_000,
}


@pytest.mark.parametrize("session_id", ODD_SESSION_IDS.values(), ids=ODD_SESSION_IDS.keys())
def test_pending_with_an_id_the_client_refuses_is_not_a_bug(
    session_id: str, setup: Setup, capsys: pytest.CaptureFixture[str]
) -> None:
    """The client checks ids before sending (``ValueError`` for an empty id or a path
    segment, ``UnicodeEncodeError`` for a lone surrogate, ``httpx.InvalidURL`` for one
    too long); ``_explain`` knows none of them, so ``pending`` ends with exit 70 "This is
    a bug" for a mistyped Session id."""
    code = _code_of(["pending", session_id])

    err = capsys.readouterr().err
    _one_line_failure(code, err)
    assert code in (EXIT_USAGE, 4), err


@pytest.mark.parametrize(
    "session_id",
    [ODD_SESSION_IDS["empty"], ODD_SESSION_IDS["slash"], ODD_SESSION_IDS["undecodable"]],
    ids=["empty", "slash", "undecodable"],
)
def test_recover_with_an_id_the_client_refuses_does_not_hang(session_id: str, setup: Setup) -> None:
    """The same ids hang ``recover`` for ever (stderr only repeats a "Could not read
    Session" log warning every poll): the runner's Session read
    raises the client's ``ValueError``/``UnicodeEncodeError``, ``on_session_read``
    (runner/_core.py) treats every error but a 404 as "try again after a poll interval"
    and only connection errors count toward ``unreachable_timeout``, so the pass never
    ends (``recover`` waits with no deadline)."""
    _, _, _, store_path = setup
    SQLiteResultStore(store_path).close()

    done = _cli_in_a_process(["recover", session_id, "--store", str(store_path)], PROMPT)

    _one_line_failure(done.returncode, done.stderr)
    assert done.returncode == EXIT_USAGE, done.stderr  # argparse: its usage, then the error
    assert "the Session id" in done.stderr or "UTF-8" in done.stderr, done.stderr


def test_calls_list_with_an_undecodable_session_filter_is_not_a_bug(
    setup: Setup, capsys: pytest.CaptureFixture[str]
) -> None:
    """``calls list --session`` with a byte that is not UTF-8 (a lone surrogate): SQLite
    cannot bind it and raises ``UnicodeEncodeError``, which ends the listing with exit
    70 "This is a bug". No record can match such an id: the answer is "0 call(s)" (as
    ``calls show`` answers "No call"), or a usage error."""
    _, session_id, action, store_path = setup
    save_result(store_path, session_id, action)

    code = _code_of(["calls", "list", "--session", "sess_\udcff", "--store", str(store_path)])

    err = capsys.readouterr().err
    assert code in (EXIT_OK, EXIT_USAGE), err
    assert "This is a bug" not in err


# -- recover against a server that refuses ------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "code"),
    [
        (lambda: api_error(401, "invalid_api_key", "Incorrect API key provided"), EXIT_CONFIG),
        (lambda: api_error(403, "permission_denied", "This key cannot read Sessions"), EXIT_CONFIG),
        (
            lambda: Response(b"<h1>413 Request Entity Too Large</h1>", 413, media_type="text/html"),
            7,
        ),
    ],
    ids=["401", "403", "413"],
)
def test_recover_ends_when_the_session_read_is_refused(
    answer: object, code: int, setup: Setup, proxy: OddProxy
) -> None:
    """``pending`` answers a 401 on the Session read with exit 3 at once; ``recover``
    against the same server never returns, only repeating a log warning: ``on_session_read``
    (runner/_core.py) retries every read error but a 404 after a poll interval, for
    ever, and only ``APIConnectionError`` counts toward ``unreachable_timeout``. An
    operator with a revoked key sees a command that hangs instead of "check
    OPENAGENTCORE_API_KEY"."""
    _, session_id, action, store_path = setup
    save_result(store_path, session_id, action)
    refusal = answer()  # type: ignore[operator]
    proxy.rule = lambda method, path, body: refusal if is_session_read(method, path) else None

    done = _cli_in_a_process(["recover", session_id, "--store", str(store_path)], PROMPT)

    _one_line_failure(done.returncode, done.stderr)
    assert done.returncode == code, done.stderr
    assert proxy.requests(is_result_post) == []


@pytest.mark.slow
def test_recover_ends_when_the_server_keeps_failing_the_resubmission(
    setup: Setup, proxy: OddProxy
) -> None:
    """A server that answers every resubmission with a 502 HTML page: the exit codes
    promise 5, "kept failing (5xx)", and the docs that ``recover`` gives up after
    ``unreachable_timeout`` (``--give-up-after``, 60 s by default; 3 here). The runner
    classified the 502 as ``retry_later`` and posted again, later and later, for ever:
    ``recover`` never returned."""
    _, session_id, action, store_path = setup
    key = save_result(store_path, session_id, action)
    page = Response(
        b"<html><body><h1>502 Bad Gateway</h1></body></html>", 502, media_type="text/html"
    )
    proxy.rule = lambda method, path, body: page if is_result_post(method, path, body) else None

    done = _cli_in_a_process(
        ["recover", session_id, "--store", str(store_path), "--give-up-after", "3"], 60.0
    )

    assert done.returncode == 5, done.stderr
    with SQLiteResultStore(store_path) as store:
        record = store.get(key)
    assert record is not None
    assert record.state is CallState.COMPLETED


@pytest.mark.parametrize(
    "answer",
    [
        lambda: api_error(401, "invalid_api_key", "Incorrect API key provided"),
        lambda: api_error(403, "permission_denied", "This key cannot post events"),
        lambda: Response(b"", 307, headers={"Location": "https://elsewhere.example/v1/x"}),
    ],
    ids=["401", "403", "307"],
)
def test_a_refused_key_on_the_resubmission_does_not_mark_the_result_rejected(
    answer: object, setup: Setup, proxy: OddProxy, capsys: pytest.CaptureFixture[str]
) -> None:
    """``classify_refusal`` (runner/_core.py) calls every 4xx/3xx it does not know a
    refusal of the result: a 401 or 403 on the resubmission (a rotated key, a key
    without write access) or a redirect marks the record ``rejected``, which the docs
    reserve for a result the server refused (400 or 422). A rejected result is never
    sent again, so once the key is fixed ``recover`` still does not submit the saved
    result: the call waits for a person to answer it by hand, and the function's real
    result is lost to the model."""
    client, session_id, action, store_path = setup
    key = save_result(store_path, session_id, action)
    refusal = answer()  # type: ignore[operator]
    proxy.rule = lambda method, path, body: refusal if is_result_post(method, path, body) else None

    main(["recover", session_id, "--store", str(store_path)])
    capsys.readouterr()
    with SQLiteResultStore(store_path) as store:
        record = store.get(key)
    assert record is not None
    assert record.state is CallState.COMPLETED, "the record was marked rejected"

    proxy.rule = lambda method, path, body: None  # the key is fixed
    assert main(["recover", session_id, "--store", str(store_path)]) == EXIT_OK
    outputs = [
        item.call_id  # type: ignore[union-attr]
        for item in client.sessions.items.list(session_id, order="asc")
        if item.type == "function_call_output"
    ]
    assert outputs == [action.call_id]


# -- a damaged store ----------------------------------------------------------------------

DAMAGE = {
    "text-timestamp": "UPDATE openagentcore_calls SET updated_at = 'yesterday'",
    "timestamp-out-of-range": "UPDATE openagentcore_calls SET updated_at = 1e20",
    "negative-year": "UPDATE openagentcore_calls SET created_at = -1e15",
    "text-lease": "UPDATE openagentcore_calls SET lease_expires_at = 'soon'",
}


@pytest.mark.parametrize("damage", DAMAGE.values(), ids=DAMAGE.keys())
@pytest.mark.parametrize("command", [["calls", "list", "--json"], ["calls", "show", "CALL"]])
def test_a_damaged_row_is_a_store_error_not_a_bug(
    damage: str, command: list[str], setup: Setup, capsys: pytest.CaptureFixture[str]
) -> None:
    """A row whose saved result is not JSON is reported as damage (exit 6, "move the
    file aside"); a row whose timestamp is text, or a number no date can hold, is not:
    ``record_from_row`` (store/_rules.py) lets ``float('yesterday')``'s ``ValueError``
    through, or ``_iso``/``_when`` (cli.py) the ``OverflowError``/``ValueError`` of
    ``datetime.fromtimestamp``, and ``calls list``/``calls show`` end with exit 70
    "This is a bug", showing none of the other calls."""
    _, session_id, action, store_path = setup
    save_result(store_path, session_id, action)
    with sqlite3.connect(store_path) as connection:
        connection.execute(damage)
    connection.close()
    argv = [action.call_id if arg == "CALL" else arg for arg in command]

    code = _code_of([*argv, "--store", str(store_path)])

    err = capsys.readouterr().err
    assert code in (EXIT_OK, EXIT_STORE), err
    assert "This is a bug" not in err


# -- secrets ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://bot:Hunter2Secret@[::1/calls",  # a bracket missing
        "postgresql://bot:Hunter2%zzSecret@127.0.0.1/calls",  # a bad %-escape in the password
    ],
    ids=["unclosed-ipv6", "bad-escape"],
)
def test_a_dsn_libpq_cannot_parse_never_shows_its_password(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``_open_postgres`` prints psycopg's first line, trusting that it "names the host
    and port but never the password". libpq's URI parse errors quote the URI, or the
    token it choked on, verbatim: the password lands on the terminal (and in CI logs)."""
    pytest.importorskip("psycopg")

    code = _code_of(["calls", "list", "--store", dsn])

    err = capsys.readouterr().err
    assert code == EXIT_STORE, err
    assert "Hunter2" not in err
    assert "Secret" not in err


# -- the terminal -------------------------------------------------------------------------


def test_calls_list_into_a_closed_pipe_is_not_a_bug(tmp_path: Path) -> None:
    """``openagentcore calls list --store S | head -1``: once ``head`` exits, the next
    ``print`` raises ``BrokenPipeError``, ``main`` turns it into exit 70 and writes "This
    is a bug in openagentcore ... report the traceback" to the terminal. A reader that
    stopped reading is not a bug (the usual answer is to exit quietly, as ``ls | head``
    does)."""
    store_path = tmp_path / "calls.db"
    with SQLiteResultStore(store_path) as store:
        for index in range(2000):
            key = CallKey("sess_1", "turn_1", f"call_{index}")
            store.claim(
                key, function_name="refund", arguments_hash="h", owner="far:1:a", lease_seconds=30
            )
    code = "import sys; from openagentcore.cli import main; sys.exit(main(sys.argv[1:]))"
    listing = subprocess.Popen(
        [
            sys.executable,
            "-c",
            code,
            "calls",
            "list",
            "--limit",
            "2000",
            "--store",
            str(store_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert listing.stdout is not None
    listing.stdout.readline()
    listing.stdout.close()  # as `head -1` does
    _, err = listing.communicate(timeout=60)

    assert listing.returncode != EXIT_BUG, err.decode()
    assert b"This is a bug" not in err


def test_calls_list_prints_ids_from_the_store_without_terminal_escapes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Session and call ids come from the server (and a function name from the model):
    ``calls list`` prints them raw, so an id holding ``ESC[2J`` clears the operator's
    screen, an OSC sequence retitles the terminal, and a newline forges a row of its own
    (here a fake "applied" line) in the listing a person trusts."""
    store_path = tmp_path / "calls.db"
    forged = "call_1\n2026-01-01 00:00:00  applied  1  refund  sess_x / call_2"
    with SQLiteResultStore(store_path) as store:
        store.claim(
            CallKey("sess_\x1b[2J\x1b]0;pwned\x07", "turn_1", forged),
            function_name="refund",
            arguments_hash="h",
            owner="far:1:a",
            lease_seconds=30,
        )

    assert main(["calls", "list", "--store", str(store_path)]) == EXIT_OK

    out = capsys.readouterr().out
    assert "\x1b" not in out
    assert "\x07" not in out
    assert len(out.splitlines()) == 3, out  # header, one call, the count
