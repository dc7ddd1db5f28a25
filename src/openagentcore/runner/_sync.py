"""``FunctionRunner``: the blocking driver of :class:`RunnerCore`.

The thread that has news for the core runs the core's round itself, under the
runner's lock, and carries out the store calls the round asks for: a stream's reader,
a function's thread, a request's thread. A call's claim, function, save and post run on
one function thread; claims made at once share a commit (SQLite's group commit).
The pump thread only keeps time (lease renewals, backoffs, timeouts) and outlives
any one serve, so a function still running when its serve ends is saved and posted
all the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import queue
import random
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any, TypeVar

from typing_extensions import Unpack

from .._client import Client
from .._streaming import EventStream
from ..store import CallKey
from ..store._records import owner_closed
from . import _pump as pump
from ._async import AsyncFunctionRunner
from ._base import RunnerError, RunnerOptions, ServeTimeout, closed_before_the_end
from ._context import CallContext, cancel_call
from ._core import Mode, Serve, heeds
from ._execution import ReturnedAwaitable, await_returned, call_async, call_sync
from ._fleet import FleetReport, ServeAgentOptions, StopRequest, hand_over_session
from ._runtime import DaemonThreads
from ._serving_sync import Serving

__all__ = ["FunctionRunner"]

T = TypeVar("T")

logger = logging.getLogger("openagentcore.runner")

#: Threads for the application's hooks (on_in_doubt, on_action) and for the requests no
#: function's thread makes (Session reads, resubmissions): a hanging request never
#: delays a lease renewal, which the pump makes.
_HOOK_THREADS = 2
_HTTP_THREADS = 4
#: How often a coroutine function run by the sync runner looks for its cancellation.
_CANCEL_POLL = 0.05
#: How long ``close()`` waits for a stream's reader to end once its stream is closed.
_READER_EXIT = 5.0


class FunctionRunner(Serving):
    """Serves the function calls of Sessions through a :class:`~openagentcore.Client`.

    Every call is claimed in ``store`` before it runs and its result saved before it is
    posted, so a crash or restart resubmits saved results instead of running effects
    twice. ``store`` takes a :class:`~openagentcore.ResultStore`, a SQLite path or a
    ``postgresql://`` URL.
    """

    def __init__(self, client: Client, **options: Unpack[RunnerOptions]) -> None:
        super().__init__(**options)
        self.client = client
        self._options = options
        #: The runners of the ``serve_agent`` calls running now (see there).
        self._fleets: dict[AsyncFunctionRunner, StopRequest] = {}
        self._lock = threading.Lock()
        #: Notified after a round of the pump that gave verdicts, or after every round
        #: while someone waits for calls to settle (``_waiting_for_idle``).
        self._changed = threading.Condition(self._lock)
        self._waiting_for_idle = 0
        self._inbox: queue.SimpleQueue[pump.Message] = queue.SimpleQueue()
        self._verdicts: dict[int, BaseException | None] = {}
        #: A function's thread claims its call, runs the function, saves and posts the
        #: result (``_take_here``). The core runs at most ``max_concurrency`` functions;
        #: the other threads make claims and posts.
        self._functions = DaemonThreads(self.max_concurrency + _HTTP_THREADS, "openagentcore-call")
        self._hook_pool = ThreadPoolExecutor(_HOOK_THREADS, thread_name_prefix="oac-hooks")
        self._http_pool = ThreadPoolExecutor(_HTTP_THREADS, thread_name_prefix="oac-http")
        self._pump_thread: threading.Thread | None = None
        #: Readers of ended serves, which may still be closing their streams.
        self._ended_readers: list[threading.Thread] = []
        #: When the pump means to look next; a round elsewhere that makes something
        #: due sooner wakes it.
        self._pump_due = 0.0
        self._closing = False
        #: The context of each running function, to cancel it.
        self._contexts: dict[CallKey, CallContext] = {}
        #: On a function's thread, the jobs its rounds hand it (``_take_here``).
        self._local = threading.local()

    # -- public API (serve, run_turn, recover, stop: see _serving_async.py) ---------------

    def close(self) -> None:
        """End the serves still running as :meth:`stop` does, finish in the background
        what ended serves left (within ``shutdown_grace``), then stop the runner's
        threads and close the store. A serve not ended by then raises ``RunnerError``."""
        self.stop()
        deadline = self._now() + self.shutdown_grace
        with self._lock:
            self._waiting_for_idle += 1
            while self._pump_thread is not None and (self._core.settling() or self._core.serves):
                left = deadline - self._now()
                if left <= 0:
                    break
                self._changed.wait(_bounded(left))
            self._waiting_for_idle -= 1
            if self._core.busy():
                logger.warning(
                    "Closing with calls still in progress; a restarted runner settles them"
                )
            self._closing = True
            owner_closed(self._core.owner)  # the pump stops: nothing renews its leases any more
            for serve_id in self._core.serves:
                self._verdicts.setdefault(serve_id, closed_before_the_end())
            self._changed.notify_all()
            thread = self._pump_thread
        self._inbox.put(pump.Wake())
        if thread is not None:
            thread.join()
        for reader in self._ended_readers:
            reader.join(timeout=_READER_EXIT)
        self._functions.shutdown(wait=False)
        self._hook_pool.shutdown(wait=True)
        self._http_pool.shutdown(wait=True)
        self._close_store()

    def __enter__(self) -> FunctionRunner:
        return self

    # -- a fleet -------------------------------------------------------------------------------

    def serve_agent(
        self, agent_id: str, *more_agent_ids: str, **options: Unpack[ServeAgentOptions]
    ) -> FleetReport:
        """Serve every Session of these Agents, shared with the other workers of the
        group, until :meth:`stop`, SIGINT or SIGTERM; then hand the Sessions over. Takes
        the options of :meth:`AsyncFunctionRunner.serve_agent
        <openagentcore.AsyncFunctionRunner.serve_agent>`; see docs/fleet.md.

        A fleet worker follows many Sessions at once, a task each: this runs the fleet
        on an event loop of its own, in this thread, with an ``AsyncFunctionRunner``
        that serves this runner's functions, with its options and hooks, through its
        store. Plain functions still run on threads of their own.
        """
        return self._serve_agent(StopRequest(), agent_id, *more_agent_ids, **options)

    def _serve_agent(
        self,
        stop: StopRequest,
        agent_id: str,
        *more_agent_ids: str,
        **options: Unpack[ServeAgentOptions],
    ) -> FleetReport:
        """``serve_agent``, ended by ``stop`` too (set before this is called, it returns
        at once): for a caller that must stop it before it could call ``stop()``."""
        with self._lock:
            if self._closing:
                raise RunnerError("This runner is closed; create a new one")
        fleet = AsyncFunctionRunner._sharing(self, self.client._async_twin(), self._options)
        fleet._stop_ahead = stop

        async def serve() -> FleetReport:
            try:
                return await fleet.serve_agent(agent_id, *more_agent_ids, **options)
            finally:
                await fleet.close()
                await fleet.client.close()

        with self._lock:
            self._fleets[fleet] = stop
        try:
            return asyncio.run(serve())
        finally:
            with self._lock:
                del self._fleets[fleet]

    def adopt(
        self, session_id: str, *, agent_id: str | None = None, group: str = "default"
    ) -> None:
        """Hand ``session_id`` to the fleet now (and wake it if parked): a worker takes
        it at once instead of at the next discovery. Idempotent. Without ``agent_id``,
        the Session is read to find its Agent."""
        if agent_id is None:
            agent_id = self.client.sessions.retrieve(session_id).agent.id
        with self._lock:
            directories = [fleet._fleet_directory for fleet in self._fleets]
        serving = next((d for d in directories if d is not None and d.group == group), None)
        hand_over_session(self.store, serving, session_id, agent_id, group)

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- serving ------------------------------------------------------------------------------

    def _attach(self, session_id: str, until: Mode) -> Serve:
        with self._lock:
            if self._closing:
                raise RunnerError("This runner is closed; create a new one")
            serve = self._core.attach(session_id, until, self._now())
            if self._pump_thread is None:
                self._pump_thread = threading.Thread(
                    target=self._pump, name="openagentcore-runner", daemon=True
                )
                self._pump_thread.start()
        self._inbox.put(pump.Wake())
        return serve

    def _detach(self, serve: Serve) -> None:
        with self._lock:
            self._core.detach(serve, self._now())
            self._verdicts.pop(serve.id, None)
        self._inbox.put(pump.Wake())

    def _reader(self, serve: Serve) -> _Reader:
        return _Reader(self, serve)

    def _reader_ended(self, thread: threading.Thread) -> None:
        """Keep a reader that may still be closing its stream, for ``close()`` to join."""
        with self._lock:
            alive = [reader for reader in self._ended_readers if reader.is_alive()]
            self._ended_readers = [*alive, thread]

    def _change_serve(self, serve: Serve, change: Callable[[], T]) -> T:
        with self._lock:
            result = change()
            self._verdicts.pop(serve.id, None)
        self._inbox.put(pump.Wake())
        return result

    def _send_stop(self, force: bool) -> None:
        self._inbox.put(pump.Stop(self._core.last_serve_id, force))  # safe in a signal handler
        for fleet, stop in list(self._fleets.items()):  # a copy: no lock (signal handler)
            stop.set()  # kept if its serve_agent does not listen yet
            fleet._stop_threadsafe(force)

    def _stop_from_signal(self) -> None:
        self.stop()

    def _wait(self, serve: Serve, deadline: float | None, *, interruptible: bool) -> None:
        """Wait for the pump's verdict on ``serve``. In ``until="idle"`` mode the first
        Ctrl-C lets running calls finish; the second exits."""
        interrupted = False
        while True:
            try:
                self._await_verdict(serve, deadline)
                return
            except KeyboardInterrupt:
                if not interruptible or interrupted:
                    raise
                interrupted = True
                logger.warning("Interrupted: finishing running calls; press Ctrl-C again to exit")
                with self._lock:
                    self._core.stop_serve(serve)
                self._inbox.put(pump.Wake())

    def _await_verdict(self, serve: Serve, deadline: float | None) -> None:
        with self._lock:
            while serve.id not in self._verdicts:
                left = None if deadline is None else deadline - self._now()
                if left is not None and left <= 0:
                    break
                self._changed.wait(_bounded(left))
            else:
                error = self._verdicts.pop(serve.id)
                if error is not None:
                    raise error
                return
            # Out of time: give back claims nobody will run, let running calls finish
            # and post within the grace, then report.
            self._core.detach(serve, self._now(), grace=True)
            self._inbox.put(pump.Wake())
            grace_end = self._now() + self.shutdown_grace
            self._waiting_for_idle += 1
            try:
                while self._core.settling(serve.session_id) and self._now() < grace_end:
                    self._changed.wait(_bounded(grace_end - self._now()))
            finally:
                self._waiting_for_idle -= 1
        raise ServeTimeout(f"Session {serve.session_id} was not settled in time", serve.report)

    # -- rounds -------------------------------------------------------------------------

    def _pump(self) -> None:
        """The timekeeper: runs a round whenever something falls due with no input (a
        lease to renew, a backoff over) or a message arrives through the inbox."""
        try:
            while True:
                with self._lock:
                    if self._closing:
                        return
                    now = self._now()
                    wait = self._core.next_wakeup(now)
                    self._pump_due = now + wait
                messages = _drain(self._inbox, wait)
                # At least one round: time alone makes things due.
                self._rounds(messages, on_pump=True)
        except BaseException as exc:
            self._fail(exc)
            raise

    def _deliver(self, message: pump.Message) -> None:
        """Hand an outcome to the core on the thread that has it, with no hand-off to
        the pump: the stream's reader, a function's thread or a request's thread runs
        the round itself (under the lock) and carries out the store calls it asks for."""
        try:
            self._rounds([message])
        except Exception as exc:
            self._fail(exc)

    def _rounds(self, messages: list[pump.Message], *, on_pump: bool = False) -> None:
        while True:
            with self._lock:
                if self._closing:
                    return
                now = self._now()
                decided = pump.run_round(self._core, self._observer, messages, now)
                self._verdicts.update(decided.verdicts)
                if decided.verdicts or self._waiting_for_idle:
                    self._changed.notify_all()  # wake waiters only when it may matter
                # Started under the lock, so in the core's order.
                store_calls = pump.carry(self, decided.effects)
                # A round elsewhere may make something due before the pump looks again
                # (the pump itself looks again right after its own rounds).
                if not on_pump and now + self._core.next_wakeup(now) < self._pump_due:
                    self._pump_due = now
                    self._inbox.put(pump.Wake())
            jobs: list[Callable[[], None]] | None = (
                getattr(self._local, "jobs", None) if self._core.idempotent_fast_path else None
            )
            if store_calls and jobs and isinstance(jobs[-1], _Post):
                # A POST kept for this thread would wait for the store calls below (an
                # idempotent function's result is posted as it is saved): it goes now.
                self._start(self._http_pool, jobs.pop())
            # Store calls run right here, one after another, and their answers go
            # straight back in; requests and functions went to their pools. A claim goes
            # to a function's thread, which then runs the function: claims made at once
            # share their commit (SQLite's group commit), so parallel calls start together.
            messages = []
            for effect in store_calls:
                if isinstance(effect, pump.ClaimCall) and not self._on_function_thread():
                    job = functools.partial(
                        self._deliver_outcome, pump.perform_store, effect, self.store
                    )
                    self._start(self._functions, self._function_thread, job)
                else:
                    messages.append(pump.perform_store(effect, self.store))
            if not messages:
                return

    def _fail(self, exc: BaseException) -> None:
        """A bug in a round: every serve must hear of it, not hang."""
        logger.error("The runner failed", exc_info=exc)
        with self._lock:
            for serve_id in self._core.serves:
                self._verdicts[serve_id] = RunnerError(f"The runner failed: {exc!r}")
            self._changed.notify_all()

    # -- effects, as a Carrier: outcomes come back through _deliver -----------------------

    def _run_function(self, effect: pump.RunFunction) -> None:
        context = effect.context()
        self._contexts[effect.key] = context
        job = functools.partial(self._run, effect, context)
        if not self._take_here(job):
            self._start(self._functions, self._function_thread, job)

    def _cancel_function(self, effect: pump.CancelFunction) -> None:
        running = self._contexts.get(effect.key)
        if running is not None:
            cancel_call(running)

    def _post_results(self, effect: pump.PostResults) -> None:
        job = _Post(self, effect)
        if not self._take_here(job):
            self._start(self._http_pool, job)

    def _read_session(self, effect: pump.ReadSession) -> None:
        self._start(self._http_pool, lambda: self._deliver(self._read(effect)))

    def _ask_in_doubt(self, effect: pump.AskInDoubt) -> None:
        assert self._on_in_doubt is not None
        hook = self._on_in_doubt
        self._start(self._hook_pool, lambda: self._deliver(pump.ask_in_doubt(hook, effect)))

    def _report_action(self, effect: pump.ReportAction) -> None:
        assert self._on_action is not None
        self._start(self._hook_pool, pump.report_action, self._on_action, effect)

    # -- a function's thread: the function, its save and its post in a row --------------

    def _function_thread(self, first: Callable[[], None]) -> None:
        """Runs ``first``, then what its rounds hand this thread (``_take_here``): a
        function's result is saved and posted with no other thread."""
        jobs: list[Callable[[], None]] = [first]
        self._local.jobs = jobs
        try:
            while jobs:
                jobs.pop()()
        finally:
            self._local.jobs = None

    def _take_here(self, job: Callable[[], None]) -> bool:
        """Keep ``job`` for this function's thread, to run after its round, if it has
        nothing else queued: one job at a time, so two functions never share it."""
        jobs: list[Callable[[], None]] | None = getattr(self._local, "jobs", None)
        if jobs is None or jobs:
            return False
        jobs.append(job)
        return True

    def _on_function_thread(self) -> bool:
        return getattr(self._local, "jobs", None) is not None

    def _start(self, pool: Executor, work: Callable[..., object], *args: object) -> None:
        """Run ``work`` on one of ``pool``'s threads."""
        try:
            pool.submit(work, *args)
        except RuntimeError:
            if self._closing:
                return  # closed: nothing starts any more; a restarted runner settles it
            # The main thread has returned: concurrent.futures takes no new work during
            # interpreter shutdown, yet a serve in another thread goes on and needs this.
            threading.Thread(target=work, args=args, name="openagentcore-late").start()

    def _deliver_outcome(self, work: Callable[..., pump.Message], *args: object) -> None:
        self._deliver(work(*args))

    def _run(self, effect: pump.RunFunction, context: CallContext) -> None:
        try:
            if effect.function.is_async:
                outcome = asyncio.run(
                    _cancellable(call_async(effect, self._hooks, context), context)
                )
            else:
                returned = call_sync(effect, self._hooks, context)
                if isinstance(returned, ReturnedAwaitable):
                    awaiting = await_returned(effect, self._hooks, context, returned)
                    outcome = asyncio.run(_cancellable(awaiting, context))
                else:
                    outcome = returned
        except BaseException:
            # SystemExit or the like inside the function: no result, so the call is
            # in doubt; the pump must hear of it all the same.
            self._inbox.put(pump.FunctionOutcome(effect.key, None))
            raise
        finally:
            self._contexts.pop(effect.key, None)
        self._deliver(outcome)


class _Post:
    """A result POST, as a job for a thread: a kind of its own so that a round can tell
    it from the other jobs kept for a function's thread (see ``_rounds``)."""

    def __init__(self, runner: FunctionRunner, effect: pump.PostResults) -> None:
        self.runner = runner
        self.effect = effect

    def __call__(self) -> None:
        self.runner._deliver(self.runner._post(self.effect))


class _Reader:
    """Follows one serve's live stream in a thread, reconnecting with backoff."""

    def __init__(self, runner: FunctionRunner, serve: Serve) -> None:
        self.runner = runner
        self.serve = serve
        self._stop = threading.Event()
        self._stream: EventStream | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="openagentcore-stream", daemon=True)

    def __enter__(self) -> None:
        self._thread.start()

    def __exit__(self, *exc_info: object) -> None:
        """Stop reading without waiting for the thread: whatever it still delivers is
        for a serve that ended, which the core ignores. ``close()`` waits for it, so
        its last store calls finish before the store closes."""
        self._stop.set()
        with self._lock:
            if self._stream is not None:
                self._stream.close()
        self.runner._reader_ended(self._thread)

    def _run(self) -> None:
        put, serve_id, runner = self.runner._deliver, self.serve.id, self.runner
        reconnect = pump.Reconnect(
            runner.client.base_url,
            self._limit(),
            runner.reconnect_max_delay,
            runner._now,
            random.random,
        )
        while not self._stop.is_set():
            failure: Exception | None = None
            try:
                stream = self._open()
            except Exception as exc:
                failure = exc
            else:
                if stream is None:
                    return
                put(pump.Connected(serve_id))
                try:
                    for event in stream:
                        reconnect.delivered()
                        if heeds(event):
                            put(pump.Received(serve_id, event))
                except Exception as exc:
                    failure = exc
                finally:
                    stream.close()
                if self._stop.is_set():
                    return
                logger.info(
                    "Event stream of %s ended (%s); reconnecting", self.serve.session_id, failure
                )
                put(pump.Dropped(serve_id))
            delay = reconnect.failed(failure)
            if delay is None:
                put(pump.StreamFailed(serve_id, reconnect.error(failure)))
                return
            self._stop.wait(_bounded(delay))

    def _limit(self) -> float | None:
        """How long to try a server that cannot be reached: a serve that must end
        gives up, one that serves forever does not."""
        return None if self.serve.until == "forever" else self.runner.unreachable_timeout

    def _open(self) -> EventStream | None:
        """The serve's stream, or ``None`` if the serve ended while it opened."""
        if self._stop.is_set():
            return None
        stream = self.runner.client.sessions.events.stream(self.serve.session_id)
        with self._lock:
            if self._stop.is_set():  # the serve ended while the stream opened
                stream.close()
                return None
            self._stream = stream
        return stream


async def _cancellable(
    running: Coroutine[Any, Any, pump.FunctionOutcome], context: CallContext
) -> pump.FunctionOutcome:
    """Run a coroutine function's call on this thread's own loop, cancelled when the
    runner sets ``context.cancelled`` (its Turn was cancelled or its time ran out)."""
    task = asyncio.ensure_future(running)
    while not task.done():
        await asyncio.wait({task}, timeout=_CANCEL_POLL)
        if context.cancelled.is_set() and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    return task.result()


def _drain(inbox: queue.SimpleQueue[pump.Message], wait: float) -> list[pump.Message]:
    """Every message waiting, after waiting up to ``wait`` seconds for the first."""
    try:
        messages = [inbox.get(timeout=_bounded(wait))]
    except queue.Empty:
        return []
    while True:
        try:
            messages.append(inbox.get_nowait())
        except queue.Empty:
            return messages


def _bounded(seconds: float | None) -> float | None:
    """A wait a lock can take: ``threading`` refuses longer ones (an infinite
    ``shutdown_grace``), with ``OverflowError``."""
    return None if seconds is None else min(seconds, threading.TIMEOUT_MAX)
