"""``serve_agent``: serve every Session of some Agents, shared with the other workers of
a group through the directory (:mod:`._fleet_directory`).

Each round of the loop heartbeats, asks the directory for the worker's plan (its fair
share, less while the group forms, see :mod:`._fleet_core`), stops following
the Sessions it no longer holds at the epoch it took them (fenced), gives back its
excess and takes orphans. Each Session it holds is followed by
``runner.serve(until="idle")``; once idle, it lingers ``park_after`` seconds following
the stream, then is parked (stream closed, row kept) until ``adopt`` or the sweep wakes
it. Discovery lists each Agent's Sessions in creation order after the
newest one seen. The loop heartbeats only while it runs, so a stuck worker lapses.

Ownership saves work (one follower per Session) and keeps every Session followed; the
call claims in the result store stay the only gate for effects, so a brief double
owner wastes CPU and never repeats an effect.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from typing_extensions import TypedDict

from .._errors import NotFoundError
from ..store import ResultStore
from ._base import RunnerError, ServeTimeout
from ._fleet_directory import Directory, open_directory
from ._signals import on_shutdown_signal

if TYPE_CHECKING:
    from ._async import AsyncFunctionRunner

__all__ = [
    "FleetOptions",
    "FleetReport",
    "ServeAgentOptions",
    "StopRequest",
    "hand_over_session",
    "serve_agent",
]

logger = logging.getLogger("openagentcore.fleet")

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class FleetOptions:
    """The fleet's knobs, in seconds (TTL and heartbeats on the directory's clock)."""

    #: How often a worker heartbeats and re-plans (and polls, without NOTIFY).
    heartbeat_interval: float = 1.0
    #: A worker whose last heartbeat is older than this has lapsed: its Sessions move.
    worker_ttl: float = 10.0
    #: How long an idle Session stays followed before it is parked.
    park_after: float = 30.0
    #: How often each Agent's new Sessions are listed.
    discovery_interval: float = 2.0
    #: How often every Session is listed to wake parked ones that wait for a call.
    sweep_interval: float = 60.0
    #: How many Sessions beyond its share a worker keeps before giving some back.
    slack: int = 1

    def __post_init__(self) -> None:
        for name in (
            "heartbeat_interval",
            "worker_ttl",
            "discovery_interval",
            "sweep_interval",
        ):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be a positive number of seconds")
        if self.park_after < 0:
            raise ValueError("park_after must be 0 or more seconds")
        if self.worker_ttl <= 2 * self.heartbeat_interval:
            raise ValueError(
                "worker_ttl must exceed twice heartbeat_interval, or live workers lapse; "
                f"got worker_ttl={self.worker_ttl}, heartbeat_interval={self.heartbeat_interval}"
            )
        if self.slack < 0:
            raise ValueError("slack must be 0 or more Sessions")


class ServeAgentOptions(TypedDict, total=False):
    """The keyword arguments of ``serve_agent`` (see
    :meth:`~openagentcore.AsyncFunctionRunner.serve_agent`)."""

    group: str
    max_sessions: int | None
    directory: Directory | None
    heartbeat_interval: float
    worker_ttl: float
    park_after: float
    discovery_interval: float
    sweep_interval: float


class StopRequest:
    """``stop()`` for a ``serve_agent`` started from another thread: safe from any
    thread and from a signal handler, and kept when it comes before the worker's loop
    listens (``FunctionRunner.serve_agent`` sends it while its event loop starts)."""

    def __init__(self) -> None:
        self._requested = False
        self._notify: Callable[[], None] | None = None

    def set(self) -> None:
        self._requested = True
        notify = self._notify
        if notify is not None:
            notify()

    def on_set(self, notify: Callable[[], None]) -> None:
        """Call ``notify`` (idempotent) on ``set()``, or now if it was set already."""
        self._notify = notify
        if self._requested:
            notify()


def hand_over_session(
    store: ResultStore, directory: Directory | None, session_id: str, agent_id: str, group: str
) -> None:
    """``adopt``: through the directory of the ``serve_agent`` running now if it serves
    ``group``, else through the store's own directory. Blocks."""
    if directory is not None and directory.group == group:
        directory.adopt([(session_id, agent_id)])
        return
    from ..fleet import adopt

    adopt(store, session_id, agent_id=agent_id, group=group)


@dataclass(slots=True)
class FleetReport:
    """What one worker did in ``serve_agent``: Sessions ``acquired``, ``released`` to
    make room for others, ``parked``, lost to another worker (``fenced``),
    ``discovered`` by listing and ``handed_over`` on exit. ``calls_run`` adds up the
    serves' reports, so a call that ended while none of its Session's serves was
    attached (between two) is not in it: a lower bound."""

    worker_id: str
    acquired: int = 0
    released: int = 0
    parked: int = 0
    fenced: int = 0
    discovered: int = 0
    calls_run: int = 0
    handed_over: int = 0
    sessions: set[str] = field(default_factory=set)


def _session_gone(error: Exception) -> bool:
    """The serve ended because the API says the Session does not exist."""
    cause = error.__cause__ if isinstance(error, RunnerError) else error
    return isinstance(cause, NotFoundError) and not cause.route_missing


def _retrieved(future: asyncio.Future[Any]) -> None:
    """Read a late outcome, so a failure is not logged as never retrieved."""
    if not future.cancelled():
        future.exception()


def new_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


async def serve_agent(
    runner: AsyncFunctionRunner,
    agent_ids: Sequence[str],
    *,
    directory: Directory | None,
    group: str,
    options: FleetOptions,
    max_sessions: int | None,
) -> FleetReport:
    """Serve the group's Sessions until ``runner.stop()`` or SIGINT/SIGTERM, then hand
    the held ones over (see the module's docstring). Without ``directory``, the one
    next to the runner's store is opened, and closed at the end.

    ``stop()`` and the signals are heeded from the call on: before its first ``await``
    this coroutine is listening for them, so a stop sent while the directory opens is
    not lost (it returns after handing nothing over)."""
    worker = _Worker(runner, agent_ids, options, max_sessions)
    return await worker.run(directory, group)


class _Worker:
    directory: Directory

    def __init__(
        self,
        runner: AsyncFunctionRunner,
        agent_ids: Sequence[str],
        options: FleetOptions,
        max_sessions: int | None,
    ) -> None:
        self.runner = runner
        self.agent_ids = list(agent_ids)
        self.options = options
        self.max_sessions = max_sessions
        self.report = FleetReport(new_worker_id())
        self.stopping = asyncio.Event()
        #: session -> (the epoch it was taken at, the task following it)
        self.following: dict[str, tuple[int, asyncio.Task[None]]] = {}
        #: The newest Session listed per Agent: discovery lists only those after it.
        self.cursors: dict[str, str | None] = dict.fromkeys(self.agent_ids)
        #: Whether a heartbeat reached the directory (the first one tells the others).
        self._joined = False
        #: When (monotonic) this worker's group has formed and it may take its whole
        #: share: it plans again then. None once formed.
        self._formed_at: float | None = None
        # Threads of its own: in asyncio's shared default pool (a few threads on a small
        # machine) the workers of one process queued behind each other's waits, a
        # statement timed out in the queue and its directory was interrupted.
        self._statements = ThreadPoolExecutor(1, thread_name_prefix="oac-fleet")
        self._listening = ThreadPoolExecutor(1, thread_name_prefix="oac-fleet-listen")

    async def _db(self, work: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """A directory statement, off the loop (the directory's I/O blocks). One that
        takes longer than the TTL (this worker has lapsed by then anyway) is
        interrupted, so a silent network cannot hold the worker forever."""
        statement = self.loop.run_in_executor(
            self._statements, functools.partial(work, *args, **kwargs)
        )
        try:
            return await asyncio.wait_for(statement, self.options.worker_ttl)
        except TimeoutError:
            self.directory.interrupt()
            raise

    def stop_soon(self) -> None:
        """Safe from any thread and from a signal handler."""
        self.loop.call_soon_threadsafe(self.stopping.set)

    def _on_signal(self) -> None:
        self.stop_soon()
        self.runner._stop_from_signal_if_started()

    async def run(self, directory: Directory | None, group: str) -> FleetReport:
        # Listening for stop() and the signals comes first, before any await: a stop
        # sent while the directory opens ends the loop before its first round.
        self.loop = asyncio.get_running_loop()
        self.runner._fleet_stops.add(self.stop_soon)
        ahead, self.runner._stop_ahead = self.runner._stop_ahead, None
        if ahead is not None:
            ahead.on_set(self.stop_soon)
        opened: Directory | None = directory
        try:
            with on_shutdown_signal(self._on_signal):
                if opened is None:
                    opened = await asyncio.to_thread(open_directory, self.runner.store, group=group)
                self.directory = self.runner._fleet_directory = opened
                await self._serve()
        finally:
            self.runner._fleet_stops.discard(self.stop_soon)
            try:
                if opened is not None:
                    self.runner._fleet_directory = None
                    await self._hand_over()
            finally:
                if directory is None and opened is not None:
                    opened.close()
                # A wait under way returns within its timeout (at once once closed).
                self._statements.shutdown(wait=False)
                self._listening.shutdown(wait=False)
        return self.report

    async def _serve(self) -> None:
        options = self.options
        now = time.monotonic()
        next_discovery = next_sweep = next_round = now
        # A round that changed nothing doubles the wait before the next one, up to a
        # quarter of the TTL (3 s at most): an idle fleet makes few statements, and a
        # lapsed worker's Sessions still move within the TTL + 3 s. A change, new
        # Sessions listed or an ownership event (NOTIFY) bring it back to
        # heartbeat_interval.
        quiet_limit = max(options.heartbeat_interval, min(options.worker_ttl / 4, 3.0))
        pause = options.heartbeat_interval
        try:
            while not self.stopping.is_set():
                now = time.monotonic()
                changed = True
                try:
                    if now >= next_discovery:
                        if await self._discover(sweep=now >= next_sweep):
                            next_round = now
                        if now >= next_sweep:
                            next_sweep = now + options.sweep_interval
                        next_discovery = now + options.discovery_interval
                    if now >= next_round:
                        changed = await self._round()
                        pause = (
                            options.heartbeat_interval if changed else min(pause * 2, quiet_limit)
                        )
                        next_round = now + pause
                        if self._formed_at is not None:
                            next_round = min(next_round, self._formed_at)
                except Exception as exc:
                    # The database is unreachable: no heartbeat, so after the TTL
                    # the others take these Sessions; the followers keep serving
                    # meanwhile (the call claims keep that safe), and the next
                    # round that reaches the database drops the ones taken.
                    logger.warning(
                        "The fleet's directory failed (%s); retrying in %s s",
                        exc,
                        options.heartbeat_interval,
                    )
                    pause = options.heartbeat_interval
                    next_round = now + pause
                wait = max(0.0, min(next_round, next_discovery) - time.monotonic())
                if await self._wait(wait):
                    pause = options.heartbeat_interval
                    next_round = time.monotonic()
        except BaseException:
            # Failed or cancelled: nothing stopped the serves, so end them here.
            for _, task in self.following.values():
                task.cancel()
            raise

    async def _round(self) -> bool:
        """One round; True if it changed what this worker follows."""
        directory, options, worker = self.directory, self.options, self.report.worker_id
        before = (self.report.acquired, self.report.released, self.report.fenced)
        await self._db(directory.heartbeat, worker, joining=not self._joined)
        self._joined = True
        plan, held = await self._db(
            directory.plan,
            worker,
            ttl=options.worker_ttl,
            slack=options.slack,
            max_sessions=self.max_sessions,
            # Workers started together join within a heartbeat interval of each other.
            settle=options.heartbeat_interval,
        )
        self._formed_at = time.monotonic() + plan.forming_for if plan.forming_for else None
        for session_id, (epoch, task) in list(self.following.items()):
            if task.done():
                del self.following[session_id]
            elif held.get(session_id) != epoch:
                # Taken over (this worker lapsed) or released by an operator: fenced.
                logger.info(
                    "Session %s moved to another worker; no longer following it", session_id
                )
                self.report.fenced += 1
                task.cancel()
                del self.following[session_id]
        for session_id, _ in plan.release:
            entry = self.following.pop(session_id, None)
            if entry is not None:
                entry[1].cancel()
        if plan.release:
            self.report.released += await self._db(directory.release, worker, plan.release)
        # Held but not followed: its follower ended without parking (a failed serve).
        unfollowed = [(s, e) for s, e in held.items() if s not in self.following]
        if unfollowed:
            await self._db(directory.release, worker, unfollowed)
        taken = await self._db(directory.acquire, worker, plan.acquire, ttl=options.worker_ttl)
        for row in taken:
            self.report.acquired += 1
            self.report.sessions.add(row.session_id)
            task = asyncio.create_task(self._follow(row.session_id, row.epoch))
            self.following[row.session_id] = (row.epoch, task)
        after = (self.report.acquired, self.report.released, self.report.fenced)
        return after != before or bool(unfollowed)

    async def _follow(self, session_id: str, epoch: int) -> None:
        """Serve the Session until it is idle, linger ``park_after``, then park it."""
        runner, park_after = self.runner, self.options.park_after
        try:
            while not self.stopping.is_set():
                report = await runner.serve(session_id, until="idle")
                self.report.calls_run += report.calls_run
                if self.stopping.is_set():
                    return
                if park_after > 0:
                    try:
                        stopped = await runner.serve(
                            session_id, until="forever", timeout=park_after
                        )
                    except ServeTimeout as lingered:
                        self.report.calls_run += lingered.report.calls_run
                        if lingered.report.calls_run or lingered.report.results_submitted:
                            continue  # active again: serve it to idle once more
                    else:
                        self.report.calls_run += stopped.calls_run
                        return  # stopped
                if self.stopping.is_set():
                    return
                if await self._db(self.directory.park, self.report.worker_id, session_id, epoch):
                    self.report.parked += 1
                return
        except Exception as exc:
            if _session_gone(exc):
                # Deleted (or never there): parked, so no worker takes it again.
                logger.warning("Session %s no longer exists; parking it", session_id)
                await self._db(self.directory.park, self.report.worker_id, session_id, epoch)
                return
            # Given back at the next round; another worker (or this one) tries again.
            logger.exception("Serving Session %s failed", session_id)

    async def _discover(self, *, sweep: bool) -> bool:
        """Add each Agent's Sessions created since the newest seen; with ``sweep``, list
        them all and wake the parked ones that wait for the application. True if it
        found any."""
        listed = False
        sessions = self.runner.client.sessions
        for agent_id in self.agent_ids:
            found: list[tuple[str, str]] = []
            waiting: list[tuple[str, str]] = []
            after = None if sweep else self.cursors[agent_id]
            try:
                async for session in sessions.list(
                    agent_id=agent_id, order="asc", after=after, limit=100
                ):
                    found.append((session.id, agent_id))
                    if session.required_actions:
                        waiting.append((session.id, agent_id))
            except Exception as exc:
                logger.warning(
                    "Listing the Sessions of %s failed (%s); retrying later", agent_id, exc
                )
            if found:
                listed = True
                self.cursors[agent_id] = found[-1][0]
                await self._db(self.directory.adopt, found, wake=False)
                self.report.discovered += len(found)
            if sweep and waiting:
                await self._db(self.directory.adopt, waiting)
        return listed

    async def _wait(self, seconds: float) -> bool:
        """Until an ownership event (NOTIFY), ``stop()`` or ``seconds``; True if an
        ownership event came."""
        stopped = asyncio.ensure_future(self.stopping.wait())
        # Not through _db: a wait queued behind the last one is no stuck statement.
        event = self.loop.run_in_executor(self._listening, self.directory.wait, seconds)
        waiters: set[asyncio.Future[Any]] = {stopped, event}
        try:
            await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
        return (
            event.done() and not event.cancelled() and event.exception() is None and event.result()
        )

    async def _hand_over(self) -> None:
        """Let the followers finish their in-flight calls (``stop()`` reached their
        serves), then give every held Session back at once."""
        self.stopping.set()
        tasks = [task for _, task in self.following.values()]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        try:
            self.report.handed_over = await self._db(self.directory.leave, self.report.worker_id)
        except Exception as exc:
            logger.warning(
                "Could not hand the Sessions over (%s); the others take them after the TTL", exc
            )
