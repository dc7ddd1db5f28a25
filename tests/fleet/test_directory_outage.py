"""A worker cut off from PostgreSQL by a silent network (a loopback proxy that stops
forwarding and closes nothing) lapses: the other worker takes its Sessions within the
TTL, and when the network comes back the cut-off worker is fenced out of them. Calls are
answered once throughout."""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import threading
from collections import Counter
from collections.abc import Callable, Iterator

import pytest

from _tcp_proxy import TcpProxy, postgres_proxy
from openagentcore import AsyncClient, Client
from openagentcore.local import FunctionCall, LocalCore, Scenario, TurnScript
from openagentcore.runner import AsyncFunctionRunner, current_call
from openagentcore.runner._fleet_directory import PostgresDirectory
from openagentcore.store import PostgresResultStore
from openagentcore.types import FunctionCallItem, FunctionCallOutputItem

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

POSTGRES_DSN_ENV = "OPENAGENTCORE_TEST_POSTGRES_DSN"
SESSIONS = 4
ROUNDS = 2
TTL = 2.0


@pytest.fixture
def postgres() -> Iterator[tuple[str, str]]:
    dsn = os.environ.get(POSTGRES_DSN_ENV)
    if not dsn:
        pytest.skip(f"set {POSTGRES_DSN_ENV} to run against PostgreSQL")
    import psycopg

    schema = f"oac_fleet_{secrets.token_hex(4)}"
    yield dsn, schema
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_a_worker_cut_off_from_postgres_lapses_and_is_fenced_when_it_returns(
    postgres: tuple[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="openagentcore.fleet")
    dsn, schema = postgres
    proxy, through_proxy = postgres_proxy(dsn)
    steps = [(FunctionCall("charge", {"order": f"r{step}"}),) for step in range(ROUNDS)]
    with (
        proxy,
        LocalCore(
            scenario=Scenario(turns=[TurnScript(steps=steps)]), keepalive_interval=0.5
        ) as core,
    ):
        asyncio.run(cut_off_worker(core, dsn, schema, through_proxy, proxy, caplog))


async def cut_off_worker(
    core: LocalCore,
    dsn: str,
    schema: str,
    through_proxy: str,
    proxy: TcpProxy,
    caplog: pytest.LogCaptureFixture,
) -> None:
    runs: Counter[str] = Counter()
    gate = threading.Event()  # calls wait on it, so the Sessions stay busy through the cut
    sync = Client(api_key=core.api_key, base_url=core.base_url)

    def make_runner() -> AsyncFunctionRunner:
        runner = AsyncFunctionRunner(
            AsyncClient(api_key=core.api_key, base_url=core.base_url),
            store=PostgresResultStore(dsn, schema=schema, pool_size=2),
            poll_interval=0.2,
        )

        @runner.function
        def charge(order: str) -> str:
            """Charge the customer for an order."""
            gate.wait(60)
            runs[current_call().call_id] += 1
            return f"charged {order}"

        return runner

    knobs = {
        "heartbeat_interval": 0.2,
        "worker_ttl": TTL,
        "discovery_interval": 0.2,
        "park_after": 0.5,
    }
    cut, other = make_runner(), make_runner()
    watcher = PostgresDirectory(dsn, schema=schema)

    def owners() -> Counter[str | None]:
        return Counter(
            owner for _, _, state, owner, _ in watcher.status().sessions if state == "active"
        )

    async def until(check: Callable[[], bool], what: str) -> None:
        try:
            async with asyncio.timeout(60):
                while not check():  # noqa: ASYNC110 (rows and server state: nothing to await)
                    await asyncio.sleep(0.05)
        except TimeoutError:
            pytest.fail(f"{what}: not within 60 s")

    agent = sync.agents.create(name="billing", model="scripted", tools=cut.tools)
    cut_serving = asyncio.create_task(
        cut.serve_agent(
            agent.id, directory=PostgresDirectory(through_proxy, schema=schema), **knobs
        )
    )
    await until(lambda: len(watcher.status().workers) == 1, "the first worker joined")
    cut_id = watcher.status().workers[0][0]
    session_ids = [
        sync.sessions.create(agent_id=agent.id, input=f"b{n}").id for n in range(SESSIONS)
    ]
    await until(lambda: owners() == Counter({cut_id: SESSIONS}), "the first worker took all")
    held_before_the_cut = {s: epoch for s, _, _, _, epoch in watcher.status().sessions}

    proxy.blackhole()
    other_serving = asyncio.create_task(other.serve_agent(agent.id, **knobs))
    # Within the TTL the silent worker lapses and the other takes every Session.
    await until(
        lambda: set(owners()) == {w for w, _, _ in watcher.status().workers} - {cut_id},
        "the other worker took the lapsed worker's Sessions",
    )
    proxy.heal()
    # Back on the network, the cut-off worker heartbeats again and owns nothing.
    await until(
        lambda: any(w == cut_id and age < 1.0 for w, age, _ in watcher.status().workers),
        "the cut-off worker came back",
    )
    # Fenced: it holds none of them at the epochs it had. It may be handed some again as
    # its fair share (2 of 4), at newer epochs, once the other sees it back.
    now = {s: (owner, epoch) for s, _, _, owner, epoch in watcher.status().sessions}
    assert all(now[s] != (cut_id, epoch) for s, epoch in held_before_the_cut.items()), now

    def fenced_out() -> set[str]:
        """The Sessions a worker saw moved to another and stopped following."""
        return {
            str(record.args[0])
            for record in caplog.records
            if isinstance(record.args, tuple) and record.msg.startswith("Session %s moved")
        }

    # The cut-off worker sees it at its next round: that heartbeat is not the round's
    # end, and beside a busy core the worker was stopped before it (fenced 0).
    await until(lambda: fenced_out() == set(session_ids), "the cut-off worker was fenced")
    gate.set()

    def settled() -> bool:
        return all(sync.sessions.retrieve(s).status == "idle" for s in session_ids)

    await until(settled, "every Session idle")
    cut.stop()
    other.stop()
    cut_report, other_report = await asyncio.gather(cut_serving, other_serving)
    for runner in (cut, other):
        await runner.close()
        await runner.client.close()
    assert cut_report.fenced == SESSIONS
    assert other_report.acquired >= SESSIONS
    for session_id in session_ids:
        items = list(sync.sessions.items.list(session_id, order="asc"))
        calls = [i.call_id for i in items if isinstance(i, FunctionCallItem)]
        outputs = Counter(i.call_id for i in items if isinstance(i, FunctionCallOutputItem))
        assert len(calls) == ROUNDS
        for call_id in calls:
            assert outputs[call_id] == 1
            assert runs[call_id] == 1
    watcher.close()
    sync.close()
