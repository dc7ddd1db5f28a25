"""Store failures, end to end (LocalCore over HTTP and a real runner), that made the
runner lose a call or answer it wrongly.

Each test failed before its fix, because of the defect its docstring names.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from openagentcore.local import FunctionCall, LocalCore
from openagentcore.runner import ServeReport, ServeTimeout
from openagentcore.store import CallKey, PostgresResultStore, SQLiteResultStore

from ._support import PAIRED, CallLog, Harness, applied_calls, one_turn

MakeCore = Callable[..., LocalCore]
MakeHarness = Callable[..., Harness]

# What is tested is the core's decision and the store's answer; one combination per
# driver covers both drivers.
RUNNER_COMBINATIONS = PAIRED

POSTGRES_DSN_ENV = "OPENAGENTCORE_TEST_POSTGRES_DSN"


def _serve(harness: Harness, session_id: str, timeout: float) -> tuple[ServeReport, bool]:
    try:
        return harness.serve(session_id, timeout=timeout), False
    except ServeTimeout as exc:
        return exc.report, True


def _runner_with_f(
    make_core: MakeCore, make_harness: MakeHarness, **options: object
) -> tuple[Harness, str, CallKey, CallLog]:
    harness = make_harness(make_core(scenario=one_turn([FunctionCall("f", {"a": 1})])), **options)
    log = CallLog()

    def f(a: int) -> int:
        """Return a."""
        log.enter("f", a)
        log.leave()
        return a

    harness.runner.function(f)
    session_id = harness.create_session()
    action = harness.wait_for_pending(session_id)[0]
    return harness, session_id, CallKey(session_id, action.turn_id, action.call_id), log


def test_a_saved_result_that_reads_null_is_neither_answered_nor_reported(
    make_core: MakeCore, make_harness: MakeHarness, tmp_path: Path
) -> None:
    """Defect: a damaged row whose result column holds the JSON text ``null`` reads
    back as a ``COMPLETED`` record without a result (``decode_result``,
    store/_rules.py:202, accepts any JSON). The runner's ``_decide_existing``
    (runner/_core.py:929) then takes it for a live claim of another worker and forgets
    the call: it is never run, never answered and not listed anywhere in the report,
    and ``serve`` waits until its timeout (a lost call). A damaged row should raise
    ``StoreCorruptError``, which the runner answers with a failed result."""
    path = tmp_path / "calls.db"
    store = SQLiteResultStore(path)
    harness, session_id, key, log = _runner_with_f(make_core, make_harness, store=store)
    # Another worker ran the call and saved its result; then the row got damaged.
    store.claim(key, function_name="f", arguments_hash="h", owner="w:1:x", lease_seconds=60)
    store.save_result(
        key,
        {"type": "agent.session.input.tool_result", "call_id": key.call_id, "output": "1"},
        owner="w:1:x",
    )
    with contextlib.closing(sqlite3.connect(path)) as raw, raw:
        raw.execute("UPDATE openagentcore_calls SET result = 'null'")

    report, timed_out = _serve(harness, session_id, timeout=3)

    answered = applied_calls(harness.client, session_id)[key.call_id].output is not None
    reported = any(
        key in keys
        for keys in (
            report.in_doubt,
            report.rejected,
            report.left_pending,
            report.conflicts,
            report.abandoned,
        )
    )
    assert answered or reported, (
        f"call {key.call_id} was neither answered nor reported (serve timed out: "
        f"{timed_out}, duplicates_skipped={report.duplicates_skipped}, runs={log.runs})"
    )


@pytest.fixture
def pg_table() -> Iterator[tuple[str, str, str]]:
    """``(dsn, schema, table)`` in a schema of its own, dropped afterwards."""
    dsn = os.environ.get(POSTGRES_DSN_ENV)
    if not dsn:
        pytest.skip(f"set {POSTGRES_DSN_ENV} to run the PostgreSQL tests")
    import psycopg

    schema = f"oac_review_{secrets.token_hex(4)}"
    yield dsn, schema, "calls"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.mark.postgres
def test_a_read_only_postgres_makes_the_runner_fail_calls_it_never_ran(
    make_core: MakeCore, make_harness: MakeHarness, pg_table: tuple[str, str, str]
) -> None:
    """Defect: while PostgreSQL refuses writes because it is read-only (a standby being
    promoted during a failover; simulated here with ``default_transaction_read_only``),
    the claim raises psycopg's ``ReadOnlySqlTransaction`` (SQLSTATE 25006, an
    InternalError) unmapped (store/_postgres.py:289-292 maps only OperationalError).
    The runner takes it as a permanent refusal (runner/_core.py:1289, 1341) and answers
    the call with "This call cannot be recorded by the runner." without ever running
    the function. docs/fleet.md says store calls raise StoreUnavailableError during a
    failover and that a call arriving then "is not run ... and claims it then"; the
    call should stay pending for a retry, not be failed for good."""
    dsn, schema, table = pg_table
    PostgresResultStore(dsn, schema=schema, table=table, pool_size=1).close()  # create it
    standby = f"{dsn}{'&' if '?' in dsn else '?'}options=-c%20default_transaction_read_only%3Don"
    store = PostgresResultStore(standby, schema=schema, table=table, pool_size=1)
    harness, session_id, key, log = _runner_with_f(make_core, make_harness, store=store)

    report, _ = _serve(harness, session_id, timeout=2)

    output = applied_calls(harness.client, session_id)[key.call_id].output
    assert output is None, (
        f"the function never ran (runs={log.runs}, store_errors={report.store_errors}), "
        f"yet the call was answered for good while the store was read-only: {output!r}"
    )
