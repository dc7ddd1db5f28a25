"""The runner's driver loop, written once: :class:`AsyncFunctionRunner` runs it on
asyncio, and the simulator runs it unchanged on virtual time.

One pump task owns the core; effects run as tasks (requests, coroutine functions) or
on a :class:`~._runtime.Lane`'s threads (the blocking store, the application's hooks,
plain functions), and their outcomes come back as messages. Each ``serve`` attaches to
the core, follows its Session's stream in a task of its own and awaits the pump's
verdict. The pump outlives any one serve, so a function still running when its serve
ends (timeout, cancellation) is saved and posted all the same.

Everything here waits and reads the time through the :class:`~._runtime.Runtime`:
the loop's decisions (what to run, when a serve ends, when to give up on a server)
depend on nothing else.
"""

from __future__ import annotations

import abc
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, TypeVar

from ..store import CallKey
from ..store._records import owner_closed
from . import _pump as pump
from ._base import RunnerError, ServeTimeout, closed_before_the_end
from ._context import CallContext, cancel_call
from ._core import Mode, Serve, heeds
from ._effects import RenewLeases
from ._execution import ReturnedAwaitable, await_returned, call_async, call_sync
from ._runtime import STORE_THREADS, Future, Inbox, Lane, Runtime, Settable
from ._serving_async import AsyncServing

__all__ = ["Driver"]

T = TypeVar("T")

logger = logging.getLogger("openagentcore.runner")


#: The most store calls one hand-off to a store thread carries, when a round has more
#: than there are threads (a restart's thousands of lookups): each hand-off costs about
#: as much CPU as a lookup, and a call that blocks holds back only its batch.
STORE_BATCH = 16


def store_batches(effects: list[pump.StoreEffect]) -> list[list[pump.StoreEffect]]:
    """The round's store calls, grouped for the store's threads: one call each while
    they fit the threads (no call waits behind another), else batches of at most
    ``STORE_BATCH``. Lease renewals always go alone: nothing may hold them back."""
    if len(effects) <= STORE_THREADS:
        return [[effect] for effect in effects]
    alone: list[list[pump.StoreEffect]] = [
        [effect] for effect in effects if isinstance(effect, RenewLeases)
    ]
    rest: list[pump.StoreEffect] = [e for e in effects if not isinstance(e, RenewLeases)]
    size = min(STORE_BATCH, -(-len(rest) // STORE_THREADS))
    return alone + [rest[start : start + size] for start in range(0, len(rest), size)]


class Driver(AsyncServing, abc.ABC):
    """The pump, the stream readers, the waits and the effects of one runner."""

    #: The runtime the loop runs on: set by the concrete runner.
    _rt: Runtime

    def _start_driver(self) -> None:
        self._inbox: Inbox[pump.Message] | None = None
        self._pump_task: Future[None] | None = None
        self._verdicts: dict[int, Settable[None]] = {}
        #: Resolved after every round of the pump, then replaced.
        self._round: Settable[None] | None = None
        self._tasks: set[Future[Any]] = set()
        self._closing = False
        #: The context of each running function, and the task of each coroutine one,
        #: to cancel them.
        self._contexts: dict[CallKey, CallContext] = {}
        self._cancellable: dict[CallKey, Future[pump.FunctionOutcome]] = {}
        self._function_tasks: dict[CallKey, Future[pump.FunctionOutcome]] = {}

    def _now(self) -> float:
        return self._rt.now()

    # -- closing ------------------------------------------------------------------------------

    async def close(self) -> None:
        """End the serves still running as :meth:`stop` does, finish in the background
        what ended serves left (within ``shutdown_grace``), then stop the pump and close
        the store. A serve not ended by then raises ``RunnerError``."""
        if self._round is not None:
            self.stop()
            await self._until(
                lambda: self._core.settling() or bool(self._core.serves), self._grace()
            )
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
        await self._rt.close(self._close_store)

    def _grace(self) -> float | None:
        return self._now() + self.shutdown_grace

    async def _until(self, busy: Callable[[], bool], deadline: float | None) -> None:
        """Wait, round after round of the pump, until ``busy()`` is false or the clock
        reads ``deadline``."""
        while busy():
            assert self._round is not None
            if not await self._rt.first(self._round, deadline):
                return

    # -- serving ------------------------------------------------------------------------------

    def _attach(self, session_id: str, until: Mode) -> Serve:
        if self._closing:
            raise RunnerError("This runner is closed; create a new one")
        if self._pump_task is None or self._pump_task.done():
            self._inbox = self._rt.inbox()
            self._round = self._rt.future()
            self._pump_task = self._rt.spawn(self._pump())
        serve = self._core.attach(session_id, until, self._now())
        self._verdicts[serve.id] = self._rt.future()
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

    def _stop_from_signal(self, force: bool = False) -> None:
        """Runs in a signal handler: only the loop's wake-up pipe is safe to touch."""
        inbox = self._inbox
        assert inbox is not None
        inbox.put_threadsafe(pump.Stop(self._core.last_serve_id, force))

    def _send_stop(self, force: bool) -> None:
        if self._inbox is not None:
            self._inbox.put(pump.Stop(self._core.last_serve_id, force))

    def _change_serve(self, serve: Serve, change: Callable[[], T]) -> T:
        result = change()
        self._verdicts[serve.id] = self._rt.future()
        self._wake()
        return result

    async def _wait(self, serve: Serve, deadline: float | None, *, interruptible: bool) -> None:
        """Wait for the pump's verdict (Ctrl-C reaches asyncio programs as a
        cancellation, so ``interruptible`` changes nothing here)."""
        future = self._verdicts[serve.id]
        if await self._rt.first(future, deadline):
            future.result()  # the serve's error, if it has one
            return
        # Out of time: give back claims nobody will run, let running calls finish and
        # post within the grace, then report.
        self._core.detach(serve, self._now(), grace=True)
        self._wake()
        await self._until(lambda: self._core.settling(serve.session_id), self._grace())
        raise ServeTimeout(f"Session {serve.session_id} was not settled in time", serve.report)

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
        while not self._closing:
            wait = self._core.next_wakeup(self._now())
            messages = await self._inbox.drain(wait)
            if self._closing:
                return
            decided = pump.run_round(self._core, self._observer, messages, self._now())
            for serve_id, error in decided.verdicts.items():
                future = self._verdicts.get(serve_id)
                if future is None or future.done():
                    continue
                if error is None:
                    future.set_result(None)
                else:
                    future.set_exception(error)
            self._after_round()
            spent, self._round = self._round, self._rt.future()
            assert spent is not None
            spent.set_result(None)
            for batch in store_batches(pump.carry(self, decided.effects)):
                self._offload(Lane.STORE, functools.partial(self._perform_stores, batch))

    def _after_round(self) -> None:
        """A look at the core after each round (the simulator checks its bookkeeping)."""

    def _perform_stores(self, batch: list[pump.StoreEffect]) -> list[pump.StoreAnswer]:
        """A batch of store calls, one after another on one store thread."""
        return [self._perform_store(effect) for effect in batch]

    def _perform_store(self, effect: pump.StoreEffect) -> pump.StoreAnswer:
        """One store call, on a store thread: the store's I/O is an edge of the loop."""
        return pump.perform_store(effect, self.store)

    # -- effects, as a Carrier: outcomes come back through the inbox ---------------------

    def _run_function(self, effect: pump.RunFunction) -> None:
        context = effect.context()
        task = self._rt.spawn(self._run(effect, context))
        self._function_tasks[effect.key] = task
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
        self._offload(Lane.HOOKS, functools.partial(pump.ask_in_doubt, self._on_in_doubt, effect))

    def _report_action(self, effect: pump.ReportAction) -> None:
        assert self._on_action is not None
        self._offload(Lane.HOOKS, functools.partial(pump.report_action, self._on_action, effect))

    def _offload(self, lane: Lane, work: Callable[[], Any]) -> None:
        """Blocking work on ``lane``'s threads; what it returns is a message."""
        self._deliver(self._rt.offload(lane, work))

    def _spawn(self, work: Coroutine[Any, Any, Any]) -> None:
        self._deliver(self._rt.spawn(work))

    def _deliver(self, future: Future[Any]) -> None:
        """Put what ``future`` returns (a message, or ``None``) into the inbox."""
        self._tasks.add(future)

        def done(finished: Future[Any]) -> None:
            self._tasks.discard(finished)
            if finished.cancelled():
                return
            if finished.exception() is not None:
                logger.error("A runner task failed: %r", finished.exception())
                return
            message = finished.result()
            if message is None or self._inbox is None:
                return
            if isinstance(message, list):  # a batch of store answers
                for answer in message:
                    self._inbox.put(answer)
            else:
                self._inbox.put(message)

        future.add_done_callback(done)

    async def _run(self, effect: pump.RunFunction, context: CallContext) -> pump.FunctionOutcome:
        try:
            if effect.function.is_async:
                return await call_async(effect, self._hooks, context)
            call = functools.partial(call_sync, effect, self._hooks, context)
            returned = await self._rt.offload(Lane.FUNCTIONS, call)
            if not isinstance(returned, ReturnedAwaitable):
                return returned
            # Awaited here, in the loop, and cancellable like a coroutine function.
            self._cancellable[effect.key] = self._function_tasks[effect.key]
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
            self._function_tasks.pop(effect.key, None)

    # -- following a serve's stream ----------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _reader(self, serve: Serve) -> AsyncIterator[None]:
        task = self._rt.spawn(self._follow(serve))
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    def _reconnect(self, serve: Serve) -> pump.Reconnect:
        """The serve's reconnect and give-up policy: a serve that must end gives up on
        a server that fails for ``unreachable_timeout``, one that serves forever not."""
        limit = None if serve.until == "forever" else self.unreachable_timeout
        rt = self._rt
        return pump.Reconnect(
            self.client.base_url, limit, self.reconnect_max_delay, rt.now, rt.jitter
        )

    async def _follow(self, serve: Serve) -> None:
        """Follow one serve's live stream into the inbox, reconnecting with backoff
        (:class:`~._pump.Reconnect` decides when, and when to give up)."""
        assert self._inbox is not None
        put, rt = self._inbox.put, self._rt
        reconnect = self._reconnect(serve)
        while True:
            failure: Exception | None = None
            try:
                stream = await self.client.sessions.events.stream(serve.session_id)
            except Exception as exc:
                failure = exc
            else:
                put(pump.Connected(serve.id))
                delivered = False
                try:
                    async for event in stream:
                        if not delivered:
                            delivered = True
                            reconnect.delivered()
                        if heeds(event):
                            put(pump.Received(serve.id, event))
                except Exception as exc:
                    failure = exc
                finally:
                    await stream.close()
                logger.info(
                    "Event stream of %s ended (%s); reconnecting", serve.session_id, failure
                )
                put(pump.Dropped(serve.id))
            delay = reconnect.failed(failure)
            if delay is None:
                put(pump.StreamFailed(serve.id, reconnect.error(failure)))
                return
            await rt.sleep(delay)
