"""``serve_agent`` end to end: several AsyncFunctionRunners in one process share an
Agent's Sessions on the emulator through one PostgreSQL database (or SQLite file)."""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from openagentcore import AsyncClient, Client, _base_client, fleet
from openagentcore.local import Faults, FunctionCall, LocalCore, Scenario, TurnScript
from openagentcore.runner import AsyncFunctionRunner, RunnerError, _fleet, current_call
from openagentcore.runner._fleet_directory import Directory, open_directory
from openagentcore.store import PostgresResultStore, ResultStore, SQLiteResultStore
from openagentcore.types import FunctionCallItem, FunctionCallOutputItem, InputMessageEvent

POSTGRES_DSN_ENV = "OPENAGENTCORE_TEST_POSTGRES_DSN"
ROUNDS = 3


@pytest.fixture(params=["sqlite", "postgres"])
def open_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[[], ResultStore]]:
    if request.param == "sqlite":
        yield lambda: SQLiteResultStore(tmp_path / "calls.db")
        return
    dsn = os.environ.get(POSTGRES_DSN_ENV)
    if not dsn:
        pytest.skip(f"set {POSTGRES_DSN_ENV} to run against PostgreSQL")
    import psycopg

    schema = f"oac_fleet_{secrets.token_hex(4)}"
    yield lambda: PostgresResultStore(dsn, schema=schema, pool_size=2)
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def core() -> Iterator[LocalCore]:
    steps = [(FunctionCall("charge", {"order": f"r{step}"}),) for step in range(ROUNDS)]
    scenario = Scenario(turns=[TurnScript(steps=steps, answer="done")])
    with LocalCore(scenario=scenario, keepalive_interval=0.5) as started:
        yield started


def outputs_per_call(client: Client, session_id: str) -> Counter[str]:
    items = list(client.sessions.items.list(session_id, order="asc"))
    calls = [i.call_id for i in items if isinstance(i, FunctionCallItem)]
    outputs = Counter(i.call_id for i in items if isinstance(i, FunctionCallOutputItem))
    return Counter({call: outputs[call] for call in calls})


def test_workers_share_an_agents_sessions_and_run_each_call_once(
    core: LocalCore, open_store: Callable[[], ResultStore]
) -> None:
    asyncio.run(share_an_agents_sessions(core, open_store))


async def share_an_agents_sessions(core: LocalCore, open_store: Callable[[], ResultStore]) -> None:
    effects: Counter[tuple[str, str]] = Counter()
    by_worker: dict[int, set[str]] = {}
    sync = Client(api_key=core.api_key, base_url=core.base_url)
    runners = []
    for worker in range(3):
        client = AsyncClient(api_key=core.api_key, base_url=core.base_url)
        runner = AsyncFunctionRunner(client, store=open_store(), poll_interval=0.2)

        def charge(order: str, worker: int = worker) -> str:
            """Charge the customer for an order."""
            call = current_call()
            effects[(call.session_id, call.call_id)] += 1
            by_worker.setdefault(worker, set()).add(call.session_id)
            return f"charged {order}"

        runner.function(charge)
        runners.append(runner)
    agent = sync.agents.create(name="billing", model="scripted", tools=runners[0].tools)
    serving = [
        asyncio.create_task(
            runner.serve_agent(
                agent.id,
                heartbeat_interval=0.2,
                # Long enough that no worker lapses beside a busy core: a lapse moves its
                # Sessions, and each is followed twice until the lapsed worker's next
                # round fences it (14 of 182 samples with 2 s, workers fenced 6-10 times).
                # Nothing here waits on a TTL: the workers hand over as they stop.
                worker_ttl=10.0,
                discovery_interval=0.2,
                park_after=0.5,
            )
        )
        for runner in runners
    ]
    watcher = open_directory(open_store())
    async with asyncio.timeout(30):  # every worker is in before the Sessions exist
        while len(watcher.status().workers) < 3:  # noqa: ASYNC110 (rows of other tasks)
            await asyncio.sleep(0.05)
    session_ids: list[str] = []
    # More Sessions while the fleet runs: found by discovery, and one by adopt.
    session_ids += [
        sync.sessions.create(agent_id=agent.id, input=f"batch {n}").id for n in range(8)
    ]
    adopted = sync.sessions.create(agent_id=agent.id, input="adopted").id
    await runners[1].adopt(adopted)
    session_ids.append(adopted)

    def settled() -> bool:
        return all(
            sync.sessions.retrieve(s).status == "idle" and len(outputs_per_call(sync, s)) == ROUNDS
            for s in session_ids
        )

    #: Open streams per followed Session, sampled while the fleet works.
    samples: list[int] = []
    async with asyncio.timeout(60):
        while not settled():
            samples += core.stream_counts().values()
            await asyncio.sleep(0.1)
    for runner in runners:
        runner.stop()
    reports = await asyncio.gather(*serving)
    for runner in runners:
        await runner.close()
        await runner.client.close()
    for session_id in session_ids:
        counts = outputs_per_call(sync, session_id)
        assert all(n == 1 for n in counts.values()), counts
        for call_id in counts:
            assert effects[(session_id, call_id)] == 1
    assert len(effects) == ROUNDS * len(session_ids)
    assert sum(report.acquired for report in reports) >= len(session_ids)
    assert len(by_worker) >= 2, "one worker served every Session"
    # One follower per Session: a second stream only while one is being replaced.
    assert samples
    doubled = sum(1 for count in samples if count > 1)
    fenced = [report.fenced for report in reports]
    assert doubled <= len(samples) // 20, f"{samples}; Sessions fenced per worker: {fenced}"
    assert watcher.status().workers == []  # each handed its Sessions over and left
    watcher.close()
    sync.close()


@pytest.mark.parametrize("woken_by", ["adopt", "sweep"])
def test_a_parked_session_is_woken_by_adopt_or_by_the_sweep(
    woken_by: str, open_store: Callable[[], ResultStore]
) -> None:
    turns = [TurnScript(steps=[(FunctionCall("charge", {"order": f"t{n}"}),)]) for n in range(2)]
    with LocalCore(scenario=Scenario(turns=turns), keepalive_interval=0.5) as core:
        asyncio.run(park_then_wake(core, open_store, woken_by))


async def park_then_wake(
    core: LocalCore, open_store: Callable[[], ResultStore], woken_by: str
) -> None:
    runs: Counter[str] = Counter()
    sync = Client(api_key=core.api_key, base_url=core.base_url)
    store = open_store()
    runner = AsyncFunctionRunner(
        AsyncClient(api_key=core.api_key, base_url=core.base_url), store=store, poll_interval=0.2
    )

    @runner.function
    def charge(order: str) -> str:
        """Charge the customer for an order."""
        runs[current_call().call_id] += 1
        return f"charged {order}"

    agent = sync.agents.create(name="billing", model="scripted", tools=runner.tools)
    session_id = sync.sessions.create(agent_id=agent.id, input="first").id
    serving = asyncio.create_task(
        runner.serve_agent(
            agent.id,
            heartbeat_interval=0.2,
            worker_ttl=2.0,
            discovery_interval=0.2,
            park_after=0.2,
            # Only the sweep's first pass (at start) when adopt must do the waking.
            sweep_interval=3600.0 if woken_by == "adopt" else 0.5,
        )
    )
    watcher = open_directory(open_store())

    def state() -> str | None:
        rows = [row for row in watcher.status().sessions if row[0] == session_id]
        return rows[0][2] if rows else None

    async with asyncio.timeout(60):
        while state() != "parked":  # noqa: ASYNC110 (rows another task writes)
            await asyncio.sleep(0.05)
        assert len(outputs_per_call(sync, session_id)) == 1
        sync.sessions.events.create(session_id, events=[InputMessageEvent.from_text("second")])
        if woken_by == "adopt":
            fleet.adopt(store, session_id, agent_id=agent.id)
        while len(outputs_per_call(sync, session_id)) < 2 or (  # noqa: ASYNC110
            sync.sessions.retrieve(session_id).status != "idle"
        ):
            await asyncio.sleep(0.05)
    runner.stop()
    report = await serving
    await runner.close()
    await runner.client.close()
    counts = outputs_per_call(sync, session_id)
    assert sorted(counts.values()) == [1, 1]
    assert all(runs[call_id] == 1 for call_id in counts)
    assert report.parked >= 1
    watcher.close()
    sync.close()


def test_an_adopted_session_that_does_not_exist_is_parked_not_retried(
    core: LocalCore, open_store: Callable[[], ResultStore]
) -> None:
    asyncio.run(adopt_a_missing_session(core, open_store))


async def adopt_a_missing_session(core: LocalCore, open_store: Callable[[], ResultStore]) -> None:
    sync = Client(api_key=core.api_key, base_url=core.base_url)
    store = open_store()
    runner = AsyncFunctionRunner(
        AsyncClient(api_key=core.api_key, base_url=core.base_url), store=store
    )
    agent = sync.agents.create(name="billing", model="scripted")
    serving = asyncio.create_task(
        runner.serve_agent(agent.id, heartbeat_interval=0.2, worker_ttl=2.0)
    )
    missing = "sess_0000000000000000000000000000dead"
    await runner.adopt(missing, agent_id=agent.id)
    watcher = open_directory(open_store())

    def state() -> str | None:
        rows = [row for row in watcher.status().sessions if row[0] == missing]
        return rows[0][2] if rows else None

    async with asyncio.timeout(60):
        while state() != "parked":  # noqa: ASYNC110 (rows another task writes)
            await asyncio.sleep(0.05)
    runner.stop()
    report = await serving
    await runner.close()
    await runner.client.close()
    assert report.acquired == 1  # taken once, then parked: not taken again
    watcher.close()
    sync.close()


def test_a_second_serve_agent_on_one_runner_is_refused(
    core: LocalCore, open_store: Callable[[], ResultStore]
) -> None:
    asyncio.run(serve_agent_twice(core, open_store))


async def serve_agent_twice(core: LocalCore, open_store: Callable[[], ResultStore]) -> None:
    runner = AsyncFunctionRunner(
        AsyncClient(api_key=core.api_key, base_url=core.base_url), store=open_store()
    )
    serving = asyncio.create_task(runner.serve_agent("agent_a", heartbeat_interval=0.2))
    watcher = open_directory(open_store())
    async with asyncio.timeout(60):
        while not watcher.status().workers:  # noqa: ASYNC110 (rows another task writes)
            await asyncio.sleep(0.05)
    with pytest.raises(RunnerError, match="already running"):
        await runner.serve_agent("agent_b")
    runner.stop()
    report = await serving
    assert watcher.status().workers == []
    assert report.acquired == 0
    await runner.close()
    await runner.client.close()
    watcher.close()


def test_a_stop_while_serve_agent_opens_its_directory_ends_it(
    core: LocalCore, open_store: Callable[[], ResultStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """stop() (or SIGTERM) may come before the loop's first round: serve_agent heeds it
    from its first line, so a worker stopped while it starts returns."""
    asyncio.run(stop_while_opening(core, open_store, monkeypatch))


async def stop_while_opening(
    core: LocalCore, open_store: Callable[[], ResultStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = AsyncFunctionRunner(
        AsyncClient(api_key=core.api_key, base_url=core.base_url), store=open_store()
    )
    opening = _fleet.open_directory

    def stop_then_open(*args: Any, **kwargs: Any) -> Directory:
        runner.stop()  # on the directory's thread, while serve_agent awaits it
        return opening(*args, **kwargs)

    monkeypatch.setattr(_fleet, "open_directory", stop_then_open)
    async with asyncio.timeout(60):
        report = await runner.serve_agent("agent_a", heartbeat_interval=0.2)
    assert report.acquired == 0
    watcher = open_directory(open_store())
    assert watcher.status().workers == []
    watcher.close()
    await runner.close()
    await runner.client.close()


def test_a_stalled_stream_is_noticed_and_reopened(
    open_store: Callable[[], ResultStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every stream goes silent (no events, no keepalives) after its first event and
    stays open. A followed idle Session gets a new input: its call is announced only on
    the silent stream, so the worker's client must time the silence out, reconnect and
    read the Session; the call is then answered once and no silent stream is left."""
    monkeypatch.setattr(_base_client, "STREAM_READ_TIMEOUT", 1.0)
    turns = [TurnScript(steps=[(FunctionCall("charge", {"order": f"t{n}"}),)]) for n in range(2)]
    faults = Faults(stall_stream_after=1)
    with LocalCore(scenario=Scenario(turns=turns), keepalive_interval=0.2, faults=faults) as core:
        asyncio.run(serve_through_stalls(core, open_store))


async def serve_through_stalls(core: LocalCore, open_store: Callable[[], ResultStore]) -> None:
    runs: Counter[str] = Counter()
    sync = Client(api_key=core.api_key, base_url=core.base_url)
    runner = AsyncFunctionRunner(
        AsyncClient(api_key=core.api_key, base_url=core.base_url), store=open_store()
    )

    @runner.function
    def charge(order: str) -> str:
        """Charge the customer for an order."""
        runs[current_call().call_id] += 1
        return f"charged {order}"

    agent = sync.agents.create(name="billing", model="scripted", tools=runner.tools)
    session_id = sync.sessions.create(agent_id=agent.id, input="first").id
    serving = asyncio.create_task(
        runner.serve_agent(
            agent.id, heartbeat_interval=0.2, worker_ttl=2.0, discovery_interval=0.2, park_after=60
        )
    )

    def settled(calls: int) -> bool:
        return (
            len(outputs_per_call(sync, session_id)) == calls
            and sync.sessions.retrieve(session_id).status == "idle"
        )

    stalls_seen = 0
    async with asyncio.timeout(30):  # the default 45 s idle timeout would not make it
        while not settled(1):  # noqa: ASYNC110 (the emulator's state)
            await asyncio.sleep(0.1)
        sync.sessions.events.create(session_id, events=[InputMessageEvent.from_text("second")])
        while not settled(2):
            stalls_seen = max(stalls_seen, core.stalled_streams())
            await asyncio.sleep(0.1)
        while core.stalled_streams():  # noqa: ASYNC110 (the emulator's count)
            await asyncio.sleep(0.1)
    assert stalls_seen, "no stream stalled: the fault did not fire"
    runner.stop()
    await serving
    await runner.close()
    await runner.client.close()
    counts = outputs_per_call(sync, session_id)
    assert sorted(counts.values()) == [1, 1]
    assert all(runs[call_id] == 1 for call_id in counts)
    sync.close()


COLD_WORKERS = 3
COLD_SESSIONS = 12


def test_workers_started_together_over_a_backlog_take_each_session_once(
    core: LocalCore, open_store: Callable[[], ResultStore]
) -> None:
    """A fleet started over Sessions created before it (a cold start): the first worker
    to join took every Session while it was alone and gave most back as the others
    joined, so Sessions were taken 1.5 to 1.75 times each and their serves were cut off
    mid-way. Workers that join within a heartbeat interval of the group's first take
    each Session once."""
    asyncio.run(cold_start(core, open_store))


async def cold_start(core: LocalCore, open_store: Callable[[], ResultStore]) -> None:
    sync = Client(api_key=core.api_key, base_url=core.base_url)
    runners = []
    for _ in range(COLD_WORKERS):
        client = AsyncClient(api_key=core.api_key, base_url=core.base_url)
        runner = AsyncFunctionRunner(client, store=open_store(), poll_interval=0.2)

        @runner.function
        def charge(order: str) -> str:
            """Charge the customer for an order; slow enough that the fleet would
            reshuffle its Sessions before they are done."""
            time.sleep(1.0)
            return f"charged {order}"

        runners.append(runner)
    agent = sync.agents.create(name="billing", model="scripted", tools=runners[0].tools)
    session_ids = [
        sync.sessions.create(agent_id=agent.id, input=f"backlog {n}").id
        for n in range(COLD_SESSIONS)
    ]
    serving = [asyncio.create_task(runner.serve_agent(agent.id)) for runner in runners]

    def settled() -> bool:
        return all(
            sync.sessions.retrieve(s).status == "idle" and len(outputs_per_call(sync, s)) == ROUNDS
            for s in session_ids
        )

    async with asyncio.timeout(60):
        while not settled():  # noqa: ASYNC110 (the Sessions move on the emulator's threads)
            await asyncio.sleep(0.1)
    watcher = open_directory(open_store())
    epochs = {session: epoch for session, _, _, _, epoch in watcher.status().sessions}
    for runner in runners:
        runner.stop()
    reports = await asyncio.gather(*serving)
    for runner in runners:
        await runner.close()
        await runner.client.close()
    watcher.close()
    sync.close()
    assert sorted(epochs) == sorted(session_ids)
    moved = {session: epoch - 1 for session, epoch in epochs.items() if epoch != 1}
    assert not moved, f"Sessions taken more than once at a cold start: {moved}"
    assert sum(report.released for report in reports) == 0
    assert sum(1 for report in reports if report.acquired) == COLD_WORKERS
