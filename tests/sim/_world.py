"""A deterministic world for the runner: one seed replays a whole faulty history.

Each worker is a real runner (``AsyncServing``: ``serve``, ``run_turn``, ``recover``,
the requests effects make, the shared ``run_round`` and ``carry``, the real
:class:`RunnerCore` and the real store rules of :class:`MemoryResultStore`) whose
coroutines are stepped on a simulated clock (:mod:`._tasks`), against a simulated
server (:mod:`._server`) that delivers every answer after a seeded delay. Some workers
serve Sessions until idle (or recover them), others drive Turns with ``run_turn``.

Faults: store outages, commits whose answer is an error, slow acknowledgements, lost
POST responses, 5xx, redirects, transient and final 409s, slow responses and request
timeouts, calls announced before they accept results, dropped and duplicated stream
events, cancelled and failed Turns, Turns that end before ``run_turn`` learns their id,
functions that exit without a result or finish after their timeout, ``on_in_doubt``
hooks that raise, workers killed at any effect boundary, and an operator who settles
calls in doubt and answers refused results by hand (``calls resolve``) while workers run.

Afterwards :meth:`World.check` asserts the runner's promises.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from openagentcore import APIError
from openagentcore.runner import ServeReport, ServeTimeout
from openagentcore.runner._core import RunnerCore, RunnerError
from openagentcore.runner._results import (
    ENDED_WITHOUT_RESULT,
    IN_DOUBT_ERROR,
    failure_event,
    success_event,
)
from openagentcore.store import (
    CallKey,
    CallRecord,
    CallState,
    InvalidTransitionError,
    MemoryResultStore,
)
from openagentcore.store._records import MANUAL_RERUN, answer_idempotency_key
from openagentcore.store._rules import encode_result

from ._runner import CHECKED_BY_THE_APPLICATION, LEASE_SECONDS, MAX_ATTEMPTS, SimRunner
from ._server import Server, ServerCall
from ._tasks import SimFuture, Task, Violation

__all__ = ["Faults", "Violation", "World", "run_seed"]

#: How long the final, fault-free worker has to settle everything.
FINAL_TIMEOUT = 60.0
#: What the operator's results say: no function produces them.
BY_HAND_OUTPUT = "settled by hand"
BY_HAND_ERROR = "refused by hand"


@dataclass(frozen=True)
class Decision:
    """What the operator last decided for a call (``output``, ``failed`` or ``rerun`` for
    a call in doubt, ``answer`` on the server for a refused one), and the call's attempt
    count, its function's runs and the workers' crashes then."""

    kind: str
    attempts: int
    event: dict[str, Any] | None
    runs: int
    crashes: int


@dataclass(frozen=True)
class Faults:
    """Probabilities of each fault, drawn per seed."""

    store_down: float = 0.0
    commit_then_error: float = 0.0
    slow_ack: float = 0.0
    post_lost: float = 0.0
    post_5xx: float = 0.0
    post_redirect: float = 0.0
    post_pending_409: float = 0.0
    read_error: float = 0.0
    slow_response: float = 0.0
    stream_drop: float = 0.0
    stream_dup: float = 0.0
    crash: float = 0.0
    function_exit: float = 0.0
    cancel_turn: float = 0.0
    early_announce: float = 0.0
    #: Calls whose ids the store refuses for good (as PostgreSQL refuses a NUL).
    unstorable_id: float = 0.0

    @classmethod
    def draw(cls, rng: random.Random) -> Faults:
        def p(high: float) -> float:
            return rng.choice((0.0, 0.0, rng.uniform(0, high)))

        return cls(
            store_down=p(0.2),
            commit_then_error=p(0.15),
            slow_ack=p(0.3),
            post_lost=p(0.2),
            post_5xx=p(0.2),
            post_redirect=p(0.03),
            post_pending_409=p(0.1),
            read_error=p(0.2),
            slow_response=p(0.1),
            stream_drop=p(0.1),
            stream_dup=p(0.2),
            crash=p(0.08),
            function_exit=p(0.5),
            cancel_turn=p(0.1),
            early_announce=p(0.3),
            unstorable_id=p(0.2),
        )


class World:
    """Everything one seed runs: clock, scheduler, server, store, workers."""

    def __init__(self, seed: int, *, mutate: Callable[[RunnerCore], None] | None = None) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.faults = Faults.draw(self.rng)
        #: The functions' ``timeout``, drawn apart so that seeds without one replay the
        #: histories they had before timeouts were simulated.
        self.timeout = random.Random(f"timeout {seed}").choice((None, None, 0.05, 0.15))
        #: The operator draws from a generator of its own, so that histories without one
        #: replay as they did before it was simulated.
        self.operator = random.Random(f"operator {seed}")
        self.operator_rate = self.operator.choice((0.0, 0.0, self.operator.uniform(0.5, 3.0)))
        #: The operator's last decision for each call it settled by hand.
        self.decisions: dict[CallKey, Decision] = {}
        #: Runs a person allowed on top of the function's own limit.
        self.reruns_by_hand: Counter[CallKey] = Counter()
        self.now = 0.0
        self._queue: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self.store = MemoryResultStore(clock=lambda: 1_700_000_000.0 + self.now)
        self.mutate = mutate
        self.server = Server(self)
        #: Calls the store refuses to record (their ids cannot be stored).
        self.unstorable: set[CallKey] = set()
        #: Runs of each call's function (effects).
        self.runs: Counter[CallKey] = Counter()
        #: Workers killed so far.
        self.crashes = 0
        self.reports: list[ServeReport] = []
        self.chaos = True
        self.generation = itertools.count(1)
        self.workers: list[SimWorker] = []
        #: Sessions whose Turns some client already had started (served, not driven).
        self.served: list[str] = []
        #: Sessions whose Turns ``run_turn`` starts, one driving worker each.
        self.driven: list[str] = []
        for index in range(self.rng.randint(1, 2)):
            session = self.server.add_session(f"sess_{index}")
            self.server.open_turn(session, self.server.draw_steps(session, few=False))
            self.served.append(session.id)

    # -- scheduling -----------------------------------------------------------------------

    def at(self, when: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._queue, (when, next(self._order), action))

    def later(self, low: float, high: float, action: Callable[[], None]) -> None:
        self.at(self.now + self.rng.uniform(low, high), action)

    def chance(self, probability: float) -> bool:
        return self.chaos and probability > 0 and self.rng.random() < probability

    def run_until(self, end: float, *, stop: Callable[[], bool] | None = None) -> None:
        queue = self._queue
        while queue and queue[0][0] <= end and (stop is None or not stop()):
            when, _, action = heapq.heappop(queue)
            if when > self.now:
                self.now = when
            action()

    # -- the whole history -------------------------------------------------------------------

    def run(self) -> None:
        # Each worker serves every Session, or drives Turns of a Session of its own.
        roles = [
            f"sess_w{index}" if self.rng.random() < 0.5 else None
            for index in range(self.rng.randint(1, 3))
        ]
        self.driven = [self.server.add_session(role).id for role in roles if role]
        for role in roles:
            self.start_worker(drives=role)
        if self.operator_rate:
            self._operator_looks()
        self.run_until(8.0)
        # Chaos ends: every worker dies, nothing fails any more, and one clean worker
        # settles everything that is left, as an operator's restart would, and
        # drives a few more Turns.
        self.chaos = False
        for worker in self.workers:
            worker.crash()
        self.run_until(self.now + LEASE_SECONDS * 1.5)
        final = self.start_worker(final=True)
        self.run_until(self.now + FINAL_TIMEOUT + 10.0, stop=final.finished)
        if not final.finished():
            raise Violation(f"seed {self.seed}: the final worker did not finish")

    def _operator_looks(self) -> None:
        """A person runs ``calls resolve`` now and then, while workers run: on a call in
        doubt, a result by hand or a rerun; on a refused result, an answer."""
        if not self.chaos:
            return
        store, rng = self.store, self.operator
        settleable = [
            record
            for record in store.find()
            if record.state is CallState.REJECTED
            or (record.state is CallState.IN_DOUBT and record.settled_by != MANUAL_RERUN)
            or store.is_stale(record)
        ]
        if settleable:
            record = rng.choice(settleable)
            if record.state is CallState.REJECTED:
                self._answer_by_hand(record, rng.choice(("output", "failed")))
            else:
                self._settle_by_hand(record, rng.choice(("output", "failed", "rerun")))
        self.at(self.now + rng.expovariate(self.operator_rate), self._operator_looks)

    def _answer_by_hand(self, record: CallRecord, kind: str) -> None:
        """``calls resolve`` on a refused result: the answer goes to the server, then the
        record is settled (it keeps the refused result)."""
        key = record.key
        event = self._by_hand(key, kind)
        assert event is not None
        try:
            self.server.accept(
                key.session_id,
                [event],
                answer_idempotency_key(record, encode_result(event)),
                by_hand=True,
            )
        except APIError:
            return  # the server did not take it: the command says so, nothing changed
        try:
            self.store.settle_refused_by_hand(key, settled_by=f"manual:{kind}")
        except InvalidTransitionError:
            return
        self.decisions[key] = Decision(
            "answer", record.attempts, event, self.runs[key], self.crashes
        )

    @staticmethod
    def _by_hand(key: CallKey, kind: str) -> dict[str, Any] | None:
        return {
            "output": success_event(key, BY_HAND_OUTPUT),
            "failed": failure_event(key, BY_HAND_ERROR),
            "rerun": None,
        }[kind]

    def _settle_by_hand(self, record: CallRecord, kind: str) -> None:
        key = record.key
        event = self._by_hand(key, kind)
        try:
            saved = self.store.settle_by_hand(key, event, settled_by=f"manual:{kind}")
        except InvalidTransitionError:
            return  # a worker moved it first: the command says so and changes nothing
        self.decisions[key] = Decision(kind, saved.attempts, event, self.runs[key], self.crashes)
        if kind == "rerun":
            self.reruns_by_hand[key] += 1

    def start_worker(self, *, drives: str | None = None, final: bool = False) -> SimWorker:
        """A worker that serves every Session until idle, or drives Turns of ``drives``
        (a Session no other worker sends input to); the final one does both."""
        worker = SimWorker(self, next(self.generation))
        self.workers.append(worker)
        if final:
            worker.finish_everything()
        elif drives is not None:
            worker.spawn_loop(worker.drive_turns(drives))
        else:
            for session_id in self.served + self.driven:
                worker.spawn_loop(worker.serve_until_idle(session_id))
        return worker

    def check(self) -> None:
        """The runner's promises, over every crash and worker of this history."""
        reported: set[CallKey] = set()
        for report in self.reports:
            reported.update(report.rejected, report.conflicts, report.in_doubt, report.abandoned)
        for session in self.server.sessions.values():
            for call in session.announced:
                call_id = call.key.call_id
                runs = self.runs[call.key]
                limit = 1 if call.name == "charge" else MAX_ATTEMPTS
                limit += self.reruns_by_hand[call.key]
                if runs > limit:
                    raise Violation(
                        f"seed {self.seed}: {call.name} {call_id} ran {runs} times (limit {limit})"
                    )
                accepted = session.results.get(call_id)
                if call.key in self.unstorable:
                    if runs:
                        raise Violation(f"seed {self.seed}: unrecordable {call_id} ran")
                    continue
                record = self.store.get(call.key)
                if record is not None and record.late_outcome is not None:
                    self._check_late(call, runs, record.late_outcome)
                if record is not None and call.key in self.decisions:
                    self._check_decision(record, self.decisions[call.key])
                if accepted is None:
                    turn = session.turn(call.key.turn_id)
                    assert turn is not None
                    if call_id in turn.pending and call.key not in reported:
                        raise Violation(
                            f"seed {self.seed}: {call_id} is still pending and nobody reported it"
                        )
                    continue
                decision = self.decisions.get(call.key)
                if decision is not None and decision.kind == "answer":
                    saved = None if record is None else record.result
                    if accepted not in (decision.event, saved):
                        raise Violation(
                            f"seed {self.seed}: the server holds a result for {call_id} that "
                            "is neither the person's answer nor the saved one"
                        )
                    continue
                if record is None or record.result != accepted:
                    raise Violation(
                        f"seed {self.seed}: the server holds a result for {call_id} that differs "
                        "from the saved one"
                    )
                if accepted["success"] and accepted.get("output", "").startswith(call.name):
                    if runs < 1:
                        raise Violation(f"seed {self.seed}: {call_id} succeeded without running")
                elif (
                    not accepted["success"]
                    and accepted["error"] == IN_DOUBT_ERROR
                    and call.name == "reserve"
                    and record.attempts < MAX_ATTEMPTS
                ):
                    raise Violation(
                        f"seed {self.seed}: idempotent {call_id} failed in doubt after "
                        f"{record.attempts} attempts"
                    )

    def _check_decision(self, record: CallRecord, decision: Decision) -> None:
        """A person's decision stands: a result by hand is the saved one, and a rerun is
        not answered by a runner's policy unless a later attempt ran and was lost."""
        call_id = record.key.call_id
        if decision.kind == "answer":
            if record.state is not CallState.ABANDONED:
                raise Violation(
                    f"seed {self.seed}: {call_id} was answered by hand, but its record is "
                    f"{record.state.value}, not settled"
                )
            return
        if decision.event is not None and record.result != decision.event:
            raise Violation(
                f"seed {self.seed}: {call_id} was settled by hand, but the store holds "
                f"another result: {record.result}"
            )
        if decision.kind != "rerun" or record.result is None:
            return
        result = record.result
        by_policy = (result["success"] is False and result.get("error") == IN_DOUBT_ERROR) or (
            result["success"] is True and result.get("output") == CHECKED_BY_THE_APPLICATION
        )
        if by_policy and record.attempts == decision.attempts:
            raise Violation(
                f"seed {self.seed}: {call_id} was cleared to run again by hand, but a "
                f"runner's in-doubt policy answered it with no new attempt: {record.result}"
            )
        if by_policy and (self.runs[record.key], self.crashes) == (
            decision.runs,
            decision.crashes,
        ):
            # Only a worker killed after taking the call over (its function may or may
            # not have started) lets the policy answer a call cleared to run again.
            raise Violation(
                f"seed {self.seed}: {call_id} was cleared to run again by hand, but a "
                "runner's in-doubt policy answered it although its function never ran and "
                f"no worker crashed: {record.result}"
            )

    def _check_late(self, call: ServerCall, runs: int, late: dict[str, Any]) -> None:
        """A late outcome is what a function that ran past its timeout produced."""
        produced = late.get("success") is True and late.get("output", "").startswith(call.name)
        ended = late.get("success") is False and late.get("error") == ENDED_WITHOUT_RESULT
        if self.timeout is None or runs < 1 or not (produced or ended):
            raise Violation(
                f"seed {self.seed}: {call.key.call_id} (timeout {self.timeout}, {runs} runs) "
                f"kept a late outcome its function did not produce: {late}"
            )


class SimWorker:
    """One runner process: its own clock, its runner, and the coroutines it runs."""

    def __init__(self, world: World, generation: int) -> None:
        self.world = world
        self.generation = generation
        self.alive = True
        #: Workers' clocks disagree: leases must be judged by the store's clock alone.
        self.skew = world.rng.uniform(-1000.0, 1000.0)
        self.rate = world.rng.uniform(0.98, 1.02)
        self.runner = SimRunner(self)
        self.tasks: list[Task] = []
        #: The application's loops (serving, driving Turns) still running.
        self.loops = 0

    def clock(self) -> float:
        """This worker's monotonic clock: its own origin, and a rate a little off."""
        return self.skew + self.world.now * self.rate

    def at_clock(self, when: float, action: Callable[[], None]) -> None:
        """Run ``action`` when this worker's clock reads ``when``."""
        self.world.at((when - self.skew) / self.rate, action)

    def spawn(
        self,
        coroutine: Coroutine[Any, Any, Any],
        on_done: Callable[[Any, Exception | None], None],
    ) -> None:
        self.tasks = [task for task in self.tasks if not task.finished]
        self.tasks.append(Task(self.world, self, coroutine, on_done))

    def spawn_loop(self, loop: Coroutine[Any, Any, None]) -> None:
        """One of the application's loops; it may end only by returning."""

        def done(_: None, error: Exception | None) -> None:
            self.loops -= 1
            if error is not None:
                raise Violation(f"seed {self.world.seed}: a runner call raised {error!r}")

        self.loops += 1
        self.spawn(loop, done)

    def finished(self) -> bool:
        return self.loops == 0

    async def sleep(self, low: float, high: float) -> None:
        woken: SimFuture[None] = SimFuture()
        self.world.later(low, high, lambda: woken.set_result(None))
        await woken

    def crash(self) -> None:
        if self.alive:
            self.alive = False
            self.world.crashes += 1
            self.world.reports.extend(serve.report for serve in self.runner._core.serves.values())
            for task in self.tasks:
                task.kill()

    # -- what the application does with its runner -----------------------------------------

    def _returned_in_time(self, began: float, timeout: float, what: str) -> None:
        """A call with ``timeout`` returns by then, plus the grace for running calls."""
        limit = began + (timeout + self.runner.shutdown_grace) / self.rate + 0.01
        if self.world.now > limit:
            raise Violation(
                f"seed {self.world.seed}: {what} returned {self.world.now - limit:.3f} s "
                "after its deadline and grace"
            )

    async def serve_until_idle(self, session_id: str) -> None:
        world, runner = self.world, self.runner
        while world.chaos:
            timeout, began = world.rng.uniform(0.5, 4.0), world.now
            try:
                if world.rng.random() < 0.2:
                    await runner.recover(session_id, timeout=timeout)
                else:
                    await runner.serve(session_id, until="idle", timeout=timeout)
            except (RunnerError, ServeTimeout):
                pass
            self._returned_in_time(began, timeout, f"serving {session_id}")
            await self.sleep(0.05, 0.5)

    async def drive_turns(self, session_id: str) -> None:
        """Input after input on a Session no other client sends input to."""
        world, runner = self.world, self.runner
        while world.chaos:
            timeout, began = world.rng.uniform(0.3, 4.0), world.now
            try:
                result = await runner.run_turn(session_id, "Go on.", timeout=timeout)
            except (ServeTimeout, APIError):
                pass  # RunnerError is not expected: every admitted input shows a Turn
            else:
                world.server.check_turn_result(result)
            self._returned_in_time(began, timeout, f"run_turn on {session_id}")
            await self.sleep(0.0, 0.5)

    def finish_everything(self) -> None:
        """The final worker: no faults, so every call must settle and every Turn end;
        it drives Turns of every driven Session, and of a fresh one."""
        world = self.world
        fresh = world.server.add_session("sess_final").id
        for session_id in world.served + world.driven:
            self.spawn_loop(self._settle(session_id))
        for session_id in [*world.driven, fresh]:
            self.spawn_loop(self._final_turns(session_id))

    async def _settle(self, session_id: str) -> None:
        try:
            await self.runner.serve(session_id, until="idle", timeout=FINAL_TIMEOUT)
        except ServeTimeout:
            raise Violation(
                f"seed {self.world.seed}: the final serve of {session_id} did not settle "
                f"within {FINAL_TIMEOUT:g} s"
            ) from None

    async def _final_turns(self, session_id: str) -> None:
        server = self.world.server
        for _ in range(self.world.rng.randint(1, 3)):
            try:
                result = await self.runner.run_turn(session_id, "Finish.", timeout=FINAL_TIMEOUT)
            except ServeTimeout:
                # Even a Turn that waits on a refused result must not be waited out:
                # run_turn returns it, not ended, with the call in report.rejected.
                raise Violation(
                    f"seed {self.world.seed}: the final run_turn on {session_id} did not "
                    f"return within {FINAL_TIMEOUT:g} s"
                ) from None
            if server.check_turn_result(result):
                return  # a person must look at a result the server refused


def run_seed(seed: int, *, mutate: Callable[[RunnerCore], None] | None = None) -> World:
    """Run one seed's whole history and check it; raises :class:`Violation`."""
    world = World(seed, mutate=mutate)
    world.run()
    world.check()
    return world
