"""Kill a serving process with SIGKILL at any instant, restart it, and check that no
call ran twice and none was lost.

Each test keeps one LocalCore in this process while worker processes
(``crash_worker.py``) come and go, sharing a SQLite result store.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from openagentcore import Client
from openagentcore.local import Faults, FunctionCall, LocalCore
from openagentcore.runner import IN_DOUBT_ERROR
from openagentcore.store import CallRecord, CallState, SQLiteResultStore

from . import crash_worker
from ._support import AppliedCall, applied_calls, one_turn

pytestmark = pytest.mark.slow

WORKER = Path(crash_worker.__file__)
WORKER_TIMEOUT = 60


@dataclass
class CrashRig:
    """One Session on a LocalCore, and the worker processes that serve it."""

    core: LocalCore
    client: Client
    workdir: Path
    session_id: str

    def run_worker(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "OPENAGENTCORE_BASE_URL": self.core.base_url,
            "OPENAGENTCORE_API_KEY": self.core.api_key,
        }
        return subprocess.run(
            [sys.executable, str(WORKER), self.session_id, str(self.workdir), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=WORKER_TIMEOUT,
            check=False,
        )

    def killed_worker(self, *args: str) -> dict[str, str]:
        """Run a worker that must die by SIGKILL in its window; returns what it hit."""
        done = self.run_worker(*args)
        assert done.returncode == -signal.SIGKILL, done.stderr
        return dict(json.loads((self.workdir / "victim.json").read_text()))

    def finishing_worker(self, *args: str) -> dict[str, Any]:
        """Run a worker to the end; returns its ServeReport as a dict."""
        done = self.run_worker(*args)
        assert done.returncode == 0, done.stderr
        report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        assert report["final_status"] == "idle"
        return report

    def effects(self) -> Counter[tuple[str, str]]:
        log = self.workdir / "effects.log"
        lines = log.read_text().splitlines() if log.exists() else []
        return Counter((line.split()[0], line.split()[1]) for line in lines)

    def records(self) -> dict[str, CallRecord]:
        store = SQLiteResultStore(self.workdir / "calls.db")
        try:
            return {record.key.call_id: record for record in store.find(session_id=self.session_id)}
        finally:
            store.close()

    def call_for_order(self, order: str) -> str:
        (call_id,) = (
            call_id
            for call_id, applied in applied_calls(self.client, self.session_id).items()
            if applied.arguments == {"order": order}
        )
        return call_id

    def check_invariants(self, kills: int = 1) -> dict[str, AppliedCall]:
        """What must hold however the workers died (``kills`` of them); returns the
        calls by ID."""
        calls = applied_calls(self.client, self.session_id)
        records = self.records()
        submitted = self.core.stored_results(self.session_id)
        effects = self.effects()
        assert calls, "the scenario made no calls"
        for call_id, applied in calls.items():
            name, order = applied.call.name, applied.arguments["order"]
            assert applied.output is not None, f"{name} {order} was never applied"
            record = records[call_id]
            runs = effects[(name, order)]
            if name == "reserve" and record.result is None:
                # Idempotent: posted as it was saved, and killed before the save
                # committed. The server holds its function's result; the record stays
                # as the claim left it (nobody sees the call pending again).
                assert record.state is CallState.STARTED
                assert runs >= 1
                assert submitted[call_id]["output"] == applied.output.output
                assert applied.output.output == f"reserved {order}"
                continue
            assert record.result is not None
            # What the server holds is byte for byte what the store saved first.
            assert submitted[call_id] == record.result
            assert applied.output.output == record.result.get("output")
            assert applied.output.error == record.result.get("error")
            if name == "charge":
                assert runs <= 1, f"charge {order} ran {runs} times"
                if record.result["success"]:
                    assert runs == 1
                    assert record.result["output"] == f"charged {order}"
                else:
                    assert record.result["error"] == IN_DOUBT_ERROR
            else:
                # Idempotent: re-run at most once per claim, plus once per kill that
                # struck while it ran before its claim was durable (it starts as its
                # claim is sent), and failed as in doubt only once its runs reached
                # max_attempts (3 by default).
                assert 1 <= runs <= record.attempts + kills
                if record.result["success"]:
                    assert record.result["output"] == f"reserved {order}"
                else:
                    assert record.result["error"] == IN_DOUBT_ERROR
                    assert record.attempts >= 3
        assert self.client.sessions.retrieve(self.session_id).status == "idle"
        return calls


@pytest.fixture
def make_rig(
    make_core: Callable[..., LocalCore], tmp_path: Path
) -> Iterator[Callable[..., CrashRig]]:
    clients: list[Client] = []

    def make(*steps: list[FunctionCall], faults: Faults | None = None) -> CrashRig:
        core = make_core(scenario=one_turn(*steps), faults=faults)
        client = Client(api_key=core.api_key, base_url=core.base_url)
        clients.append(client)
        session = client.sessions.create(
            agent={"model": "scripted", "tools": crash_worker.tools()}, input="process orders"
        )
        return CrashRig(core, client, tmp_path, session.id)

    yield make
    for client in clients:
        client.close()


SEQUENTIAL = [
    [FunctionCall("charge", {"order": "o1"})],
    [FunctionCall("reserve", {"order": "o2"})],
    [FunctionCall("charge", {"order": "o3"})],
    [FunctionCall("reserve", {"order": "o4"})],
]
RUNNERS = ["sync", "async"]
#: (runner that is killed, runner that restarts): each window kills and restarts both
#: drivers somewhere, without paying for every combination.
SYNC_THEN_ASYNC = ("sync", "async")
ASYNC_THEN_SYNC = ("async", "sync")
BOTH_ORDERS = pytest.mark.parametrize(
    ("killed", "restarted"), [SYNC_THEN_ASYNC, ASYNC_THEN_SYNC], ids=["sync-async", "async-sync"]
)


@pytest.mark.parametrize(("killed", "restarted"), [SYNC_THEN_ASYNC], ids=["sync-async"])
def test_killed_before_claim_runs_the_call_once_after_restart(
    make_rig: Callable[..., CrashRig], killed: str, restarted: str
) -> None:
    rig = make_rig(*SEQUENTIAL)
    victim = rig.killed_worker("--kill", "claim:charge", "--runner", killed)
    assert rig.records() == {}
    assert rig.effects() == Counter()

    rig.finishing_worker("--runner", restarted)

    rig.check_invariants()
    record = rig.records()[victim["call_id"]]
    assert record.attempts == 1
    assert record.result is not None
    assert record.result["success"] is True
    assert rig.effects()[("charge", "o1")] == 1


@BOTH_ORDERS
def test_killed_after_the_effect_fails_the_call_in_doubt_without_rerunning(
    make_rig: Callable[..., CrashRig], killed: str, restarted: str
) -> None:
    rig = make_rig(*SEQUENTIAL)
    rig.killed_worker("--kill", "effect:charge", "--runner", killed)
    assert [r.state for r in rig.records().values()] == [CallState.STARTED]

    report = rig.finishing_worker("--runner", restarted)

    rig.check_invariants()
    victim = rig.call_for_order("o1")
    assert report["in_doubt"] == [victim]
    record = rig.records()[victim]
    assert record.result is not None
    assert record.result["success"] is False
    assert record.result["error"] == IN_DOUBT_ERROR
    assert record.attempts == 1
    assert rig.effects()[("charge", "o1")] == 1


@BOTH_ORDERS
def test_killed_after_the_effect_reruns_an_idempotent_call_exactly_once(
    make_rig: Callable[..., CrashRig], killed: str, restarted: str
) -> None:
    rig = make_rig(*SEQUENTIAL)
    rig.killed_worker("--kill", "effect:reserve", "--runner", killed)

    report = rig.finishing_worker("--runner", restarted)

    rig.check_invariants()
    victim = rig.call_for_order("o2")
    assert report["in_doubt"] == [victim]
    assert report["calls_run"] == 3  # o2 again, then o3 and o4
    record = rig.records()[victim]
    assert record.attempts == 2
    assert record.result is not None
    assert record.result["output"] == "reserved o2"
    assert rig.effects() == Counter(
        {("charge", "o1"): 1, ("reserve", "o2"): 2, ("charge", "o3"): 1, ("reserve", "o4"): 1}
    )


@BOTH_ORDERS
def test_killed_mid_run_before_its_claim_is_durable_runs_an_idempotent_call_as_new(
    make_rig: Callable[..., CrashRig], killed: str, restarted: str
) -> None:
    """An idempotent function starts as its claim is sent: killed while it runs and
    before the claim reaches the store, it leaves no record, and the restarted worker
    runs it again as a new call (attempt 1, not in doubt)."""
    rig = make_rig(*SEQUENTIAL)
    rig.killed_worker("--kill", "unclaimed:reserve", "--runner", killed)
    victim = rig.call_for_order("o2")
    assert victim not in rig.records()
    assert rig.effects()[("reserve", "o2")] == 1

    report = rig.finishing_worker("--runner", restarted)

    rig.check_invariants()
    assert report["in_doubt"] == []
    record = rig.records()[victim]
    assert record.attempts == 1
    assert record.result is not None
    assert record.result["output"] == "reserved o2"
    assert rig.effects()[("reserve", "o2")] == 2


@BOTH_ORDERS
def test_killed_after_posting_before_saving_keeps_an_idempotent_result(
    make_rig: Callable[..., CrashRig], killed: str, restarted: str
) -> None:
    """An idempotent function's result is posted as it is saved: killed after the
    server took it and before the save committed, the record stays started without a
    result, and the restarted worker neither runs nor posts the call again (the
    server no longer lists it pending)."""
    rig = make_rig(*SEQUENTIAL)
    victim = rig.killed_worker("--kill", "unsaved:reserve", "--runner", killed)["call_id"]
    held = rig.core.stored_results(rig.session_id)[victim]
    assert held["output"] == "reserved o2"
    assert rig.records()[victim].state is CallState.STARTED

    report = rig.finishing_worker("--runner", restarted)

    rig.check_invariants()
    assert report["calls_run"] == 2  # o3 and o4
    assert report["in_doubt"] == []
    assert rig.core.stored_results(rig.session_id)[victim] == held
    assert rig.records()[victim].state is CallState.STARTED
    assert rig.records()[victim].result is None
    assert rig.effects()[("reserve", "o2")] == 1


@pytest.mark.parametrize(
    ("function", "killed", "restarted"),
    [("charge", *ASYNC_THEN_SYNC), ("reserve", *SYNC_THEN_ASYNC)],
    ids=["charge-async-sync", "reserve-sync-async"],
)
def test_killed_after_saving_resubmits_the_saved_result(
    make_rig: Callable[..., CrashRig], function: str, killed: str, restarted: str
) -> None:
    rig = make_rig(*SEQUENTIAL)
    victim = rig.killed_worker("--kill", f"saved:{function}", "--runner", killed)
    saved = rig.records()[victim["call_id"]]
    assert saved.state is CallState.COMPLETED
    # An idempotent function's result is posted as it is saved: the server may hold it
    # already (then it is no longer pending, and nothing is resubmitted).
    posted = victim["call_id"] in rig.core.stored_results(rig.session_id)
    assert function == "reserve" or not posted

    report = rig.finishing_worker("--runner", restarted)

    rig.check_invariants()
    assert report["results_resubmitted"] == (0 if posted else 1)
    assert report["in_doubt"] == []
    assert rig.core.stored_results(rig.session_id)[victim["call_id"]] == saved.result
    assert sum(rig.effects().values()) == 4


@pytest.mark.parametrize(("killed", "restarted"), [ASYNC_THEN_SYNC], ids=["async-sync"])
def test_killed_after_submitting_neither_reruns_nor_loses_the_call(
    make_rig: Callable[..., CrashRig], killed: str, restarted: str
) -> None:
    rig = make_rig(*SEQUENTIAL)
    victim = rig.killed_worker("--kill", "submitted:charge", "--runner", killed)
    # The server has the result; the store does not know yet (marks are written later),
    # and the next call was not claimed yet.
    assert rig.records()[victim["call_id"]].state is CallState.COMPLETED
    assert list(rig.records()) == [victim["call_id"]]

    report = rig.finishing_worker("--runner", restarted)

    rig.check_invariants()
    assert report["calls_run"] == 3
    assert report["in_doubt"] == []
    assert sum(rig.effects().values()) == 4


PARALLEL = [
    [
        FunctionCall("charge", {"order": "o1"}),
        FunctionCall("reserve", {"order": "o2"}),
        FunctionCall("charge", {"order": "o3"}),
    ],
    [FunctionCall("reserve", {"order": "o4"})],
]


@pytest.mark.parametrize("window", ["shared", "shared_committed"])
@BOTH_ORDERS
def test_killed_inside_a_shared_commit_loses_nothing_and_runs_nothing_twice(
    make_rig: Callable[..., CrashRig], window: str, killed: str, restarted: str
) -> None:
    """The store's first commit is held until the other two calls' claims wait for it,
    so they share the next commit; the worker dies before that commit's COMMIT, or
    right after it before any caller hears of it."""
    rig = make_rig(*PARALLEL)
    victims = rig.killed_worker("--kill", f"{window}:any", "--runner", killed)["call_ids"]
    shared = victims.split(",")
    assert len(shared) >= 2
    records = rig.records()
    if window == "shared":
        assert not set(shared) & set(records)  # rolled back whole: no claim of it stays
    else:
        assert all(records[call].state is CallState.STARTED for call in shared)
    # Their callers never heard of the claims: none of those functions ran. (The first
    # call's claim committed alone, so its function may have.)
    assert sum(rig.effects().values()) <= 1

    rig.finishing_worker("--runner", restarted)

    calls = rig.check_invariants()
    assert len(calls) == 4
    effects = rig.effects()
    for call in shared:  # run once at most, by the restarted worker
        assert effects[(calls[call].call.name, calls[call].arguments["order"])] <= 1
    if window == "shared":  # nothing of them was recorded: they ran as new calls
        assert all(rig.records()[call].attempts == 1 for call in shared)


KILLS = 10
#: Rounds of three parallel calls: enough work that most random kills land mid-Turn.
STEPS = 10


#: A server that also drops streams, repeats events and loses responses.
CHAOS = Faults(close_stream_after=40, duplicate_every=7, lose_input_response_every=5, retry_after=0)


# A hang guard per worker process, each of which WORKER_TIMEOUT already bounds, instead
# of the suite's 120 s for the whole test: beside a busy core (load 13) each of up to
# eleven workers took about 10 s to import, and both tests ran out of the 120 s.
@pytest.mark.timeout((KILLS + 1) * WORKER_TIMEOUT)
@pytest.mark.parametrize(
    ("seed", "faults"), [(20261203, None), (4051, CHAOS)], ids=["quiet-server", "chaotic-server"]
)
def test_random_kills_never_repeat_or_lose_a_call(
    make_rig: Callable[..., CrashRig], seed: int, faults: Faults | None
) -> None:
    names = ["charge", "reserve", "charge"]
    steps = [
        [FunctionCall(name, {"order": f"s{step}c{slot}"}) for slot, name in enumerate(names)]
        for step in range(STEPS)
    ]
    rig = make_rig(*steps, faults=faults)
    chance = random.Random(seed)
    kills = 0
    for attempt in range(KILLS):
        runner = RUNNERS[attempt % 2]
        delay = f"{chance.uniform(0.0, 0.25):.3f}"
        done = rig.run_worker("--kill-after", delay, "--runner", runner)
        if done.returncode == 0:
            break
        assert done.returncode == -signal.SIGKILL, done.stderr
        kills += 1
    rig.finishing_worker("--runner", "sync")

    calls = rig.check_invariants(kills)
    assert len(calls) == 3 * STEPS
    assert kills >= 3, f"only {kills} kills landed; the delays are too long"
