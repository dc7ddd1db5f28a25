"""``AsyncFunctionRunner``: the asyncio driver of :class:`RunnerCore`.

One task follows each Session's live stream; functions run as tasks (coroutine
functions directly, plain functions in worker threads) under one concurrency limit
shared by every Session the runner serves. Core decisions run in a worker thread, one
at a time per Session, because the store is blocking.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import signal
import threading
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

import tenacity
from typing_extensions import Unpack

from .._client import AsyncClient
from .._errors import NotFoundError, OpenAgentCoreError
from .._streaming import AsyncEventStream
from ..types import UserMessage
from ._base import (
    Connected,
    Dropped,
    Fatal,
    Finished,
    Lost,
    Message,
    Received,
    RunnerBase,
    RunnerError,
    RunnerOptions,
    Until,
    Wake,
    final_text,
    input_event,
    parse_output,
)
from ._core import Job, SessionState
from ._report import ServeReport, TurnResult
from ._sync import _deadline, _fatal, _reconnectable

__all__ = ["AsyncFunctionRunner"]

logger = logging.getLogger("openagentcore.runner")


class _Inbox:
    """A queue whose wait can time out without ever losing a message."""

    def __init__(self) -> None:
        self._items: deque[Message] = deque()
        self._ready = asyncio.Event()

    def put(self, message: Message) -> None:
        self._items.append(message)
        self._ready.set()

    async def wait(self, timeout: float | None) -> None:
        if not self._items:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._ready.wait(), timeout)
        self._ready.clear()

    def drain(self) -> list[Message]:
        items = list(self._items)
        self._items.clear()
        return items


class AsyncFunctionRunner(RunnerBase):
    """The asyncio twin of :class:`~openagentcore.FunctionRunner`.

    Accepts coroutine functions and plain functions (run in worker threads). One runner
    can serve many Sessions at once: ``max_concurrency`` bounds the calls running
    across all of them.
    """

    default_max_concurrency = 16

    def __init__(self, client: AsyncClient, **options: Unpack[RunnerOptions]) -> None:
        super().__init__(**options)
        self.client = client
        self._slots: asyncio.Semaphore | None = None
        self._stopping = threading.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._inboxes: set[_Inbox] = set()
        # Plain functions get threads of their own: in asyncio's shared default pool
        # (a few threads on a small machine) they would run fewer than max_concurrency
        # at once and queue the runner's own store calls behind them.
        self._function_threads = ThreadPoolExecutor(
            self.max_concurrency, thread_name_prefix="openagentcore-call"
        )

    # -- public API ----------------------------------------------------------------------

    async def serve(
        self, session_id: str, *, until: Until = "idle", timeout: float | None = None
    ) -> ServeReport:
        """Serve the Session's calls until it is idle or failed with nothing pending
        (``until="forever"``: until :meth:`stop`, SIGINT or SIGTERM)."""
        state = SessionState(session_id, ServeReport(session_id))
        self._stopping.clear()
        with self._signals(until == "forever"):
            async with self._reader(session_id) as reader:
                await self._loop(state, reader, until, _deadline(timeout))
        return state.report

    async def run_turn(
        self,
        session_id: str,
        input: str | Sequence[UserMessage | Mapping[str, Any]],
        *,
        output_type: type[Any] | None = None,
        timeout: float | None = None,
    ) -> TurnResult:
        """Send ``input``, serve the calls of the Turn it starts, and return its outcome."""
        state = SessionState(session_id, ServeReport(session_id))
        deadline = _deadline(timeout)
        async with self._reader(session_id) as reader:
            await self._loop(state, reader, "connected", deadline)
            await self.client.sessions.events.create(session_id, events=[input_event(input)])
            latest = await self.client.sessions.turns.list(session_id, order="desc", limit=1)
            if not latest.data:
                raise RunnerError(f"Session {session_id} admitted the input but shows no Turn")
            self._core.start_turn(state, latest.data[0].id, latest.data[0].status)
            await self._loop(state, reader, "turn", deadline)
        assert state.target_turn is not None
        items: Sequence[object] | None = state.streamed_answer()
        if items is None:
            items = [
                item async for item in self.client.sessions.items.list(session_id, order="asc")
            ]
        text = final_text(items, state.target_turn)
        return TurnResult(
            session_id=session_id,
            turn_id=state.target_turn,
            status=state.target_turn_status or "unknown",
            text=text,
            output=parse_output(text, output_type),
            report=state.report,
        )

    async def recover(self, session_id: str) -> ServeReport:
        """One reconciliation pass (see :meth:`FunctionRunner.recover`)."""
        state = SessionState(session_id, ServeReport(session_id))
        inbox = _Inbox()
        await self._reconcile(state, inbox)
        while state.busy():
            await self._submit(state)
            if state.in_flight:
                await inbox.wait(self._core.next_delay(state))
                for message in inbox.drain():
                    await self._handle(state, message, inbox)
            elif state.delayed or state.unsaved:
                await asyncio.sleep(self._core.next_delay(state) or 0)
            if self._core.housekeeping_due(state):
                await asyncio.to_thread(self._core.housekeep, state)
        if state.marks:
            await asyncio.to_thread(self._core.flush_marks, state)
        state.report.final_status = state.status
        return state.report

    def stop(self) -> None:
        """Ask running ``serve`` calls to finish their in-flight calls and return."""
        self._stopping.set()
        for inbox in list(self._inboxes):
            inbox.put(Wake())

    async def close(self) -> None:
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._function_threads.shutdown(wait=False)
        await asyncio.to_thread(self._core.close)
        await asyncio.to_thread(self.store.close)

    async def __aenter__(self) -> AsyncFunctionRunner:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- the loop ----------------------------------------------------------------------------

    async def _loop(
        self,
        state: SessionState,
        reader: _Reader,
        until: Until | Literal["turn", "connected"],
        deadline: float | None,
    ) -> None:
        core = self._core
        while True:
            step = core.next_step(
                state,
                until,
                connected=reader.connected_once,
                stopping=self._stopping.is_set(),
                poll_interval=self.poll_interval,
                deadline=deadline,
            )
            if step.finish:
                if state.marks:
                    await asyncio.to_thread(core.flush_marks, state)
                return
            if step.reconcile:
                await self._reconcile(state, reader.messages)
                continue
            await reader.messages.wait(step.wait)
            for message in reader.messages.drain():
                await self._handle(state, message, reader.messages)
            await self._submit(state)
            if core.housekeeping_due(state):
                await asyncio.to_thread(core.housekeep, state)

    async def _handle(self, state: SessionState, message: Message, inbox: _Inbox) -> None:
        if isinstance(message, Received):
            if self._core.touches_store(state, message.event):
                jobs = await asyncio.to_thread(self._core.on_event, state, message.event)
            else:
                jobs = self._core.on_event(state, message.event)
            self._start(jobs, inbox)
        elif isinstance(message, Finished):
            await asyncio.to_thread(self._core.finished, state, message.key, message.event)
        elif isinstance(message, Connected):
            await self._reconcile(state, inbox)
        elif isinstance(message, Dropped):
            state.report.reconnects += 1
        elif isinstance(message, Lost):
            await asyncio.to_thread(self._core.crashed, state, message.key)
        elif isinstance(message, Fatal):
            raise _fatal(state.session_id, message.error)

    async def _reconcile(self, state: SessionState, inbox: _Inbox) -> None:
        try:
            session = await self.client.sessions.retrieve(state.session_id)
        except NotFoundError as exc:
            raise _fatal(state.session_id, exc) from exc
        self._start(await asyncio.to_thread(self._core.on_session, state, session), inbox)
        if state.target_turn is not None:
            turn = await self.client.sessions.turns.retrieve(
                state.target_turn, session_id=state.session_id
            )
            self._core.on_turn(state, turn.id, turn.status)

    def _start(self, jobs: list[Job], inbox: _Inbox) -> None:
        for job in jobs:
            task = asyncio.create_task(self._run(job, inbox))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, job: Job, inbox: _Inbox) -> None:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_concurrency)
        try:
            async with self._slots:
                if job.function.is_async:
                    event = await self._core.execute_async(job)
                else:
                    call = functools.partial(
                        contextvars.copy_context().run, self._core.execute, job
                    )
                    event = await asyncio.get_running_loop().run_in_executor(
                        self._function_threads, call
                    )
        except BaseException:
            inbox.put(Lost(job.call.key))  # no result: the call stays claimed, in doubt
            raise
        inbox.put(Finished(job.call.key, event))

    async def _submit(self, state: SessionState) -> None:
        batches = self._core.take_batches(state)
        while batches:
            batch = batches.pop(0)
            error: Exception | None = None
            try:
                await self.client.sessions.events.create(
                    batch.session_id, events=batch.events, idempotency_key=batch.idempotency_key
                )
            except NotFoundError as exc:
                raise _fatal(state.session_id, exc) from exc
            except OpenAgentCoreError as exc:
                error = exc
            batches.extend(self._core.submitted(state, batch, error))

    @contextlib.contextmanager
    def _signals(self, install: bool) -> Any:
        loop = asyncio.get_running_loop()
        installed: list[signal.Signals] = []
        if install and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.add_signal_handler(sig, self.stop)
                    installed.append(sig)
        try:
            yield
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)

    @contextlib.asynccontextmanager
    async def _reader(self, session_id: str) -> AsyncIterator[_Reader]:
        reader = _Reader(self, session_id)
        task = asyncio.create_task(reader.run())
        self._inboxes.add(reader.messages)
        try:
            yield reader
        finally:
            self._inboxes.discard(reader.messages)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await reader.close()


class _Reader:
    """Follows one Session's live stream into ``messages``, reconnecting with backoff."""

    def __init__(self, runner: AsyncFunctionRunner, session_id: str) -> None:
        self.runner = runner
        self.session_id = session_id
        self.messages = _Inbox()
        self.connected_once = False
        self._stream: AsyncEventStream | None = None

    async def run(self) -> None:
        while True:
            try:
                stream = await self._open()
            except Exception as exc:
                self.messages.put(Fatal(exc))
                return
            self._stream = stream
            self.connected_once = True
            self.messages.put(Connected())
            error: BaseException | None = None
            try:
                async for event in stream:
                    self.messages.put(Received(event))
            except Exception as exc:
                error = exc
            finally:
                await stream.close()
            logger.info("Event stream of %s ended (%s); reconnecting", self.session_id, error)
            self.messages.put(Dropped(error))

    async def _open(self) -> AsyncEventStream:
        retrying = tenacity.AsyncRetrying(
            retry=tenacity.retry_if_exception(_reconnectable),
            wait=tenacity.wait_random_exponential(
                multiplier=0.05, max=self.runner.reconnect_max_delay
            ),
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                return await self.runner.client.sessions.events.stream(self.session_id)
        raise AssertionError("tenacity returned without an outcome")  # pragma: no cover

    async def close(self) -> None:
        if self._stream is not None:
            await self._stream.close()
