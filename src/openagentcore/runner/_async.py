"""``AsyncFunctionRunner``: the asyncio driver of :class:`RunnerCore`.

One pump task owns the core; effects run as tasks (HTTP, coroutine functions) or in
worker threads (the blocking store, plain functions), and their outcomes come back as
messages. Each ``serve`` attaches to the core, follows its Session's stream in a task
of its own and awaits the pump's verdict. The pump outlives any one serve, so a
function still running when its serve ends (timeout, cancellation) is saved and posted
all the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import tenacity
from typing_extensions import Unpack

from .._client import AsyncClient
from .._network import Wakeup
from ..store import CallKey
from ..store._records import owner_closed
from . import _pump as pump
from ._base import RunnerError, RunnerOptions, ServeTimeout, closed_before_the_end
from ._context import CallContext, cancel_call
from ._core import Mode, Serve, heeds
from ._execution import ReturnedAwaitable, await_returned, call_async, call_sync
from ._serving_async import AsyncServing

__all__ = ["AsyncFunctionRunner"]

T = TypeVar("T")

logger = logging.getLogger("openagentcore.runner")

_STORE_THREADS = 16


class _Inbox:
    """Messages for the pump; ``put`` is safe from any thread and a signal handler."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._items: deque[pump.Message] = deque()
        self._arrived = Wakeup()

    def put(self, message: pump.Message) -> None:
        self._items.append(message)
        if threading.get_ident() == self._loop_thread:
            self._arrived.wake()  # no wake-up pipe needed on the loop's own thread
        else:
            self._loop.call_soon_threadsafe(self._arrived.wake)

    def put_threadsafe(self, message: pump.Message) -> None:
        """``put`` that always wakes the loop through its pipe (for signal handlers)."""
        self._items.append(message)
        self._loop.call_soon_threadsafe(self._arrived.wake)

    async def drain(self, wait: float) -> list[pump.Message]:
        """Every message waiting, after waiting up to ``wait`` seconds for the first.

        Not ``asyncio.wait_for``: woken as the pump is cancelled, it can swallow the
        cancellation, and a pump that runs on keeps ``asyncio.run`` from returning."""
        if not self._items:
            with contextlib.suppress(TimeoutError):
                await self._arrived.wait(wait if math.isfinite(wait) else None)
        items = []
        while self._items:  # one at a time: a put from another thread is never cleared
            items.append(self._items.popleft())
        return items


class AsyncFunctionRunner(AsyncServing):
    """The asyncio twin of :class:`~openagentcore.FunctionRunner`.

    Accepts coroutine functions and plain functions (run in worker threads). One runner
    can serve many Sessions at once: ``max_concurrency`` bounds the calls running
    across all of them.
    """

    default_max_concurrency = 16

    def __init__(self, client: AsyncClient, **options: Unpack[RunnerOptions]) -> None:
        super().__init__(**options)
        self.client = client
        self._inbox: _Inbox | None = None
        self._pump_task: asyncio.Task[None] | None = None
        self._verdicts: dict[int, asyncio.Future[None]] = {}
        #: Set after every round of the pump.
        self._changed: asyncio.Event | None = None
        self._tasks: set[asyncio.Future[Any]] = set()
        self._closing = False
        #: The context of each running function, and the task of each coroutine one,
        #: to cancel them.
        self._contexts: dict[CallKey, CallContext] = {}
        self._cancellable: dict[CallKey, asyncio.Future[pump.FunctionOutcome]] = {}
        # Plain functions get threads of their own: in asyncio's shared default pool
        # (a few threads on a small machine) they would run fewer than max_concurrency
        # at once and queue the runner's own store calls behind them.
        self._function_threads = ThreadPoolExecutor(
            self.max_concurrency, thread_name_prefix="openagentcore-call"
        )
        self._store_threads = ThreadPoolExecutor(_STORE_THREADS, thread_name_prefix="oac-store")

    # -- public API (serve, run_turn, recover, stop: see _serving_async.py) ---------------

    async def close(self) -> None:
        """End the serves still running as :meth:`stop` does, finish in the background
        what ended serves left (within ``shutdown_grace``), then stop the pump and close
        the store. A serve not ended by then raises ``RunnerError``."""
        if self._changed is not None:
            self.stop()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._ended(), self.shutdown_grace)
        if self._core.busy():
            logger.warning("Closing with calls still in progress; a restarted runner settles them")
        self._closing = True
        owner_closed(self._core.owner)  # the pump stops: nothing renews its leases any more
        if self._pump_task is not None:
            # A flag, not cancel(): on Python 3.11 wait_for can swallow a cancellation
            # that races with its own wake-up, and the pump is woken constantly.
            self._wake()
            await self._pump_task
        for verdict in self._verdicts.values():
            if not verdict.done():
                verdict.set_exception(closed_before_the_end())
        for task in list(self._tasks):
            task.cancel()
        self._function_threads.shutdown(wait=False)
        await asyncio.to_thread(self._store_threads.shutdown, wait=True)
        await asyncio.to_thread(self.store.close)

    async def __aenter__(self) -> AsyncFunctionRunner:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- serving ------------------------------------------------------------------------------

    def _attach(self, session_id: str, until: Mode) -> Serve:
        if self._closing:
            raise RunnerError("This runner is closed; create a new one")
        loop = asyncio.get_running_loop()
        if self._pump_task is None or self._pump_task.done():
            self._inbox = _Inbox(loop)
            self._changed = asyncio.Event()
            self._pump_task = loop.create_task(self._pump(), name="openagentcore-runner")
        serve = self._core.attach(session_id, until, self._now())
        self._verdicts[serve.id] = loop.create_future()
        self._wake()
        return serve

    def _detach(self, serve: Serve) -> None:
        self._core.detach(serve, self._now())
        future = self._verdicts.pop(serve.id, None)
        if future is not None and not future.done():
            future.cancel()
        self._wake()

    def _wake(self) -> None:
        assert self._inbox is not None
        self._inbox.put(pump.Wake())

    def _stop_from_signal(self) -> None:
        """Runs in a signal handler: only the loop's wake-up pipe is safe to touch."""
        inbox = self._inbox
        assert inbox is not None
        inbox.put_threadsafe(pump.Stop(self._core.last_serve_id))

    def _send_stop(self, force: bool) -> None:
        if self._inbox is not None:
            self._inbox.put(pump.Stop(self._core.last_serve_id, force))

    def _change_serve(self, serve: Serve, change: Callable[[], T]) -> T:
        result = change()
        self._verdicts[serve.id] = asyncio.get_running_loop().create_future()
        self._wake()
        return result

    async def _wait(self, serve: Serve, deadline: float | None, *, interruptible: bool) -> None:
        """Wait for the pump's verdict (Ctrl-C reaches asyncio programs as a
        cancellation, so ``interruptible`` changes nothing here)."""
        future = self._verdicts[serve.id]
        left = None if deadline is None else max(0.0, deadline - self._now())
        try:
            await asyncio.wait_for(asyncio.shield(future), left)
        except asyncio.TimeoutError:
            pass
        else:
            return
        # Out of time: give back claims nobody will run, let running calls finish and
        # post within the grace, then report.
        self._core.detach(serve, self._now(), grace=True)
        self._wake()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._idle(serve.session_id), self.shutdown_grace)
        raise ServeTimeout(f"Session {serve.session_id} was not settled in time", serve.report)

    async def _ended(self) -> None:
        """Until no call is in progress and every serve has returned."""
        assert self._changed is not None
        while self._core.settling() or self._core.serves:
            self._changed.clear()
            await self._changed.wait()

    async def _idle(self, session_id: str | None = None) -> None:
        assert self._changed is not None
        while self._core.settling(session_id):
            self._changed.clear()
            await self._changed.wait()

    # -- the pump -----------------------------------------------------------------------------

    async def _pump(self) -> None:
        try:
            await self._pump_rounds()
        except Exception as exc:  # a bug: every serve must hear of it, not hang
            logger.exception("The runner's pump failed")
            for future in self._verdicts.values():
                if not future.done():
                    future.set_exception(RunnerError(f"The runner failed: {exc!r}"))
            raise

    async def _pump_rounds(self) -> None:
        assert self._inbox is not None
        assert self._changed is not None
        while not self._closing:
            wait = self._core.next_wakeup(self._now())
            messages = await self._inbox.drain(wait)
            decided = pump.run_round(self._core, self._observer, messages, self._now())
            for serve_id, error in decided.verdicts.items():
                future = self._verdicts.get(serve_id)
                if future is None or future.done():
                    continue
                if error is None:
                    future.set_result(None)
                else:
                    future.set_exception(error)
            self._changed.set()
            for store_call in pump.carry(self, decided.effects):
                self._in_thread(functools.partial(pump.perform_store, store_call, self.store))

    # -- effects, as a Carrier: outcomes come back through the inbox ---------------------

    def _run_function(self, effect: pump.RunFunction) -> None:
        context = effect.context()
        task = asyncio.ensure_future(self._run(effect, context))
        if effect.function.is_async:
            self._cancellable[effect.key] = task
        self._contexts[effect.key] = context
        self._deliver(task)

    def _cancel_function(self, effect: pump.CancelFunction) -> None:
        running = self._contexts.get(effect.key)
        if running is not None:
            cancel_call(running)  # a plain function sees it; a coroutine is cancelled
            cancellable = self._cancellable.get(effect.key)
            if cancellable is not None:
                cancellable.cancel()

    def _post_results(self, effect: pump.PostResults) -> None:
        self._spawn(self._post(effect))

    def _read_session(self, effect: pump.ReadSession) -> None:
        self._spawn(self._read(effect))

    def _ask_in_doubt(self, effect: pump.AskInDoubt) -> None:
        assert self._on_in_doubt is not None
        self._in_thread(functools.partial(pump.ask_in_doubt, self._on_in_doubt, effect))

    def _report_action(self, effect: pump.ReportAction) -> None:
        assert self._on_action is not None
        self._in_thread(functools.partial(pump.report_action, self._on_action, effect))

    def _in_thread(self, work: Callable[[], Any]) -> None:
        """Blocking work (the store, the application's hooks) in the runner's threads."""
        self._deliver(asyncio.get_running_loop().run_in_executor(self._store_threads, work))

    def _spawn(self, work: Any) -> None:
        self._deliver(asyncio.ensure_future(work))

    def _deliver(self, future: asyncio.Future[Any]) -> None:
        """Put what ``future`` returns (a message, or ``None``) into the inbox."""
        self._tasks.add(future)

        def done(finished: asyncio.Future[Any]) -> None:
            self._tasks.discard(finished)
            if finished.cancelled():
                return
            if finished.exception() is not None:
                logger.error("A runner task failed: %r", finished.exception())
                return
            message = finished.result()
            if message is not None and self._inbox is not None:
                self._inbox.put(message)

        future.add_done_callback(done)

    async def _run(self, effect: pump.RunFunction, context: CallContext) -> pump.FunctionOutcome:
        try:
            if effect.function.is_async:
                return await call_async(effect, self._hooks, context)
            call = functools.partial(call_sync, effect, self._hooks, context)
            loop = asyncio.get_running_loop()
            returned = await loop.run_in_executor(self._function_threads, call)
            if not isinstance(returned, ReturnedAwaitable):
                return returned
            # Awaited here, on the loop, and cancellable like a coroutine function.
            task = asyncio.current_task()
            assert task is not None
            self._cancellable[effect.key] = task
            return await await_returned(effect, self._hooks, context, returned)
        except BaseException:
            # No result (SystemExit, or the runner closing): the call is in doubt; the
            # pump must hear of it all the same.
            assert self._inbox is not None
            self._inbox.put(pump.FunctionOutcome(effect.key, None))
            raise
        finally:
            self._contexts.pop(effect.key, None)
            self._cancellable.pop(effect.key, None)

    @contextlib.asynccontextmanager
    async def _reader(self, serve: Serve) -> AsyncIterator[None]:
        task = asyncio.create_task(self._follow(serve))
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _follow(self, serve: Serve) -> None:
        """Follow one serve's live stream into the inbox, reconnecting with backoff."""
        assert self._inbox is not None
        put = self._inbox.put
        while True:
            limit = None if serve.until == "forever" else self.unreachable_timeout
            outage = pump.Outage(self.client.base_url, limit)
            retrying = tenacity.AsyncRetrying(
                retry=tenacity.retry_if_exception(pump.reconnectable),
                stop=outage,
                wait=tenacity.wait_random_exponential(
                    multiplier=0.05, max=self.reconnect_max_delay
                ),
                reraise=True,
            )
            try:
                async for attempt in retrying:
                    with attempt:
                        stream = await self.client.sessions.events.stream(serve.session_id)
            except Exception as exc:
                put(pump.StreamFailed(serve.id, outage.error(exc)))
                return
            put(pump.Connected(serve.id))
            error: BaseException | None = None
            try:
                async for event in stream:
                    if heeds(event):
                        put(pump.Received(serve.id, event))
            except Exception as exc:
                error = exc
            finally:
                await stream.close()
            logger.info("Event stream of %s ended (%s); reconnecting", serve.session_id, error)
            put(pump.Dropped(serve.id))
