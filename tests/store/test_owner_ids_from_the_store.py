"""Owner ids read back from the store must never make a store call raise.

An owner id is data in the store: whatever its pid part holds, ``is_stale`` (and so
``claim``, ``settle_by_hand`` and ``calls list``) has to answer, falling back to the lease
when the id names no process this host can look at."""

from __future__ import annotations

import pytest

from openagentcore.store import CallKey, CallState, ResultStore, owner_is_alive, owner_is_dead
from openagentcore.store._records import process_host

KEY = CallKey("sess_audit", "turn_audit", "call_audit")

#: Larger than any pid_t: Linux pids stop at 2**22, and os.kill takes a C int.
HUGE_PIDS = [2**31, 10**30]


@pytest.mark.parametrize("pid", HUGE_PIDS, ids=str)
def test_liveness_of_an_owner_id_with_a_pid_beyond_pid_t_does_not_raise(pid: int) -> None:
    """``_local_pid`` (src/openagentcore/store/_records.py) accepts any positive integer,
    and ``owner_is_dead`` hands it to ``os.kill(pid, 0)``, which raises ``OverflowError``
    for a pid beyond a C int, instead of answering "not known dead"."""
    owner = f"{process_host()}:{pid}:1-abcdef"

    assert owner_is_alive(owner) is False
    assert owner_is_dead(owner) is False


@pytest.mark.parametrize("pid", HUGE_PIDS, ids=str)
def test_a_claim_on_a_record_whose_owner_id_holds_a_huge_pid_does_not_raise(
    store: ResultStore, pid: int
) -> None:
    """A record held (fresh lease) by an owner id of this host whose pid part is beyond
    a C int: a second runner's ``claim`` computes ``is_stale`` for its answer, and that
    raises ``OverflowError`` out of ``claim``. The runner takes any exception that is not
    ``StoreUnavailableError`` for a permanent refusal and posts "This call cannot be
    recorded by the runner." for a call another owner holds; ``calls list`` and
    ``calls resolve`` of the store fail the same way."""
    owner = f"{process_host()}:{pid}:1-abcdef"
    assert store.claim(
        KEY, function_name="refund", arguments_hash="x", owner=owner, lease_seconds=600
    ).won

    claim = store.claim(
        KEY, function_name="refund", arguments_hash="x", owner="other:2:cd", lease_seconds=60
    )

    assert not claim.won
    assert claim.record.state is CallState.STARTED
    assert claim.stale is False  # the lease decides: it is fresh


def test_a_runner_leaves_a_call_held_by_such_an_owner_to_its_lease(tmp_path: object) -> None:
    """The runner's view of the same record: its ``claim`` raises ``OverflowError``, the
    core takes that for a permanent store refusal (``_on_store_refused``) and posts a
    failed result, "This call cannot be recorded by the runner.", for a call whose record
    another owner holds under a fresh lease. It must leave the call to that lease."""
    import time
    from pathlib import Path

    from openagentcore import Client, FunctionRunner, SQLiteResultStore
    from openagentcore.local import LocalCore
    from openagentcore.runner import ServeTimeout
    from openagentcore.types import FunctionCallAction, FunctionCallOutputItem

    tool = {
        "type": "function",
        "name": "refund",
        "description": "Refund an order.",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
    }
    core = LocalCore(keepalive_interval=0.2).start()
    client = Client(base_url=core.base_url, api_key=core.api_key)
    try:
        session = client.sessions.create(agent={"model": "scripted", "tools": [tool]}, input="go")
        deadline = time.monotonic() + 10
        actions: list[FunctionCallAction] = []
        while not actions and time.monotonic() < deadline:
            actions = [
                a
                for a in client.sessions.retrieve(session.id).required_actions
                if isinstance(a, FunctionCallAction)
            ]
            time.sleep(0.02)
        (action,) = actions
        key = CallKey(session.id, action.turn_id, action.call_id)
        path = Path(str(tmp_path)) / "calls.db"
        held = SQLiteResultStore(path)
        try:
            assert held.claim(
                key,
                function_name="refund",
                arguments_hash="x",
                owner=f"{process_host()}:{2**31}:1-abcdef",
                lease_seconds=600,
            ).won
        finally:
            held.close()
        runs: list[str] = []
        runner = FunctionRunner(client, store=SQLiteResultStore(path))

        @runner.function(name="refund")
        def refund(order_id: str = "") -> str:
            """Refund an order."""
            runs.append(order_id)
            return "refunded"

        with runner, pytest.raises(ServeTimeout):
            runner.serve(session.id, timeout=2)
        outputs = [
            item
            for item in client.sessions.items.list(session.id)
            if isinstance(item, FunctionCallOutputItem)
        ]
        assert (runs, outputs) == ([], [])
    finally:
        client.close()
        core.stop()
