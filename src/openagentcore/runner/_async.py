"""``AsyncFunctionRunner``: the driver loop (:mod:`._driver`) on asyncio.

The loop is written once and the simulator runs it too; this module only chooses the
real edges: the event loop, ``time.monotonic`` and thread pools of their own for the
store, the application's hooks and plain functions.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from typing_extensions import Unpack

from .._client import AsyncClient
from ._base import RunnerBase, RunnerError, RunnerOptions
from ._driver import Driver
from ._fleet import FleetOptions, FleetReport, StopRequest, hand_over_session, serve_agent
from ._fleet_directory import Directory
from ._runtime import AsyncioRuntime

__all__ = ["AsyncFunctionRunner"]


class AsyncFunctionRunner(Driver):
    """The asyncio twin of :class:`~openagentcore.FunctionRunner`.

    Accepts coroutine functions and plain functions (run in worker threads). One runner
    can serve many Sessions at once: ``max_concurrency`` bounds the calls running
    across all of them.
    """

    default_max_concurrency = 16

    def __init__(self, client: AsyncClient, **options: Unpack[RunnerOptions]) -> None:
        super().__init__(**options)
        self.client = client
        self._rt = AsyncioRuntime(self.max_concurrency)
        self._start_driver()
        #: How ``stop()`` reaches each running ``serve_agent``.
        self._fleet_stops: set[Callable[[], None]] = set()
        #: Whether ``serve_agent`` runs (one at a time), and its directory once open,
        #: for ``adopt``.
        self._fleet_running = False
        self._fleet_directory: Directory | None = None
        #: The stop request the next ``serve_agent`` heeds, set up by whoever starts it
        #: from another thread (``FunctionRunner.serve_agent``), so that a stop sent
        #: before it listens is kept.
        self._stop_ahead: StopRequest | None = None

    async def serve_agent(
        self,
        agent_id: str,
        *more_agent_ids: str,
        group: str = "default",
        max_sessions: int | None = None,
        directory: Directory | None = None,
        heartbeat_interval: float = 1.0,
        worker_ttl: float = 10.0,
        park_after: float = 30.0,
        discovery_interval: float = 2.0,
        sweep_interval: float = 60.0,
    ) -> FleetReport:
        """Serve every Session of these Agents, shared with the other workers of
        ``group``, until :meth:`stop`, SIGINT or SIGTERM; then hand the Sessions over.

        Workers share Sessions through rows next to the result store's records (its
        PostgreSQL database, or its SQLite file for processes on one host): each
        follows at most its fair share, a worker whose heartbeat lapses for
        ``worker_ttl`` seconds loses its Sessions to the others, and an idle Session is
        parked after ``park_after`` seconds. Ownership saves work; the call claims stay
        what makes each call run once. See docs/fleet.md.
        """
        if max_sessions is not None and max_sessions < 1:
            raise ValueError(f"max_sessions must be at least 1, got {max_sessions!r}")
        options = FleetOptions(
            heartbeat_interval=heartbeat_interval,
            worker_ttl=worker_ttl,
            park_after=park_after,
            discovery_interval=discovery_interval,
            sweep_interval=sweep_interval,
        )
        if self._fleet_running:  # set before any await below: two calls cannot both pass
            raise RunnerError(
                "serve_agent is already running on this runner; pass every Agent to that "
                "call (serve_agent(agent_a, agent_b)) or use another runner for another group"
            )
        self._fleet_running = True
        try:
            return await serve_agent(
                self,
                [agent_id, *more_agent_ids],
                directory=directory,
                group=group,
                options=options,
                max_sessions=max_sessions,
            )
        finally:
            self._fleet_running = False

    async def adopt(
        self, session_id: str, *, agent_id: str | None = None, group: str = "default"
    ) -> None:
        """Hand ``session_id`` to the fleet now (and wake it if parked): a worker takes
        it at once instead of at the next discovery. Idempotent. Without ``agent_id``,
        the Session is read to find its Agent."""
        if agent_id is None:
            agent_id = (await self.client.sessions.retrieve(session_id)).agent.id
        await asyncio.to_thread(
            hand_over_session, self.store, self._fleet_directory, session_id, agent_id, group
        )

    @classmethod
    def _sharing(
        cls, runner: RunnerBase, client: AsyncClient, options: RunnerOptions
    ) -> AsyncFunctionRunner:
        """A runner built with ``options`` that serves ``runner``'s functions through
        ``runner``'s store, and leaves that store open when it closes."""
        borrowed = options.copy()
        borrowed["store"] = runner.store
        borrowed["max_concurrency"] = runner.max_concurrency
        shared = cls(client, **borrowed)
        for function in runner._registry:
            shared._registry.add(function)
        shared._closes_store = False
        return shared

    def _send_stop(self, force: bool) -> None:
        for stop in list(self._fleet_stops):
            stop()
        super()._send_stop(force)

    def _stop_threadsafe(self, force: bool) -> None:
        """``stop()`` from another thread or a signal handler: only the loop's wake-up
        pipe is touched."""
        for stop in list(self._fleet_stops):
            stop()  # each is safe from any thread
        if self._inbox is not None:
            self._stop_from_signal(force)

    def _stop_from_signal_if_started(self) -> None:
        if self._inbox is not None:
            self._stop_from_signal()

    async def __aenter__(self) -> AsyncFunctionRunner:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
