"""``FunctionRunner``: the blocking driver of :class:`RunnerCore`.

Threads: the caller's thread makes every decision and every request except the stream
read; one reader thread follows the live stream (reconnecting with backoff); a pool
runs the functions. They talk through one queue, so decisions never race.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import signal
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from types import FrameType
from typing import Any, Literal

import tenacity
from typing_extensions import Unpack

from .._client import Client
from .._errors import APIStatusError, NotFoundError, OpenAgentCoreError
from .._streaming import EventStream
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

__all__ = ["FunctionRunner"]

logger = logging.getLogger("openagentcore.runner")


class FunctionRunner(RunnerBase):
    """Serves the function calls of Sessions through a :class:`~openagentcore.Client`.

    Every call is claimed in ``store`` before it runs and its result saved before it is
    posted, so a crash or restart resubmits saved results instead of running effects
    twice. ``store`` takes a :class:`~openagentcore.ResultStore`, a SQLite path or a
    ``postgresql://`` URL.
    """

    def __init__(self, client: Client, **options: Unpack[RunnerOptions]) -> None:
        super().__init__(**options)
        self.client = client
        self._pool = ThreadPoolExecutor(
            self.max_concurrency, thread_name_prefix="openagentcore-call"
        )
        self._stopping = threading.Event()
        self._inboxes: set[queue.Queue[Message]] = set()

    # -- public API ----------------------------------------------------------------------

    def serve(
        self, session_id: str, *, until: Until = "idle", timeout: float | None = None
    ) -> ServeReport:
        """Serve the Session's calls until it is idle or failed with nothing pending
        (``until="forever"``: until :meth:`stop`, SIGINT or SIGTERM)."""
        state = SessionState(session_id, ServeReport(session_id))
        self._stopping.clear()
        with self._signals(until == "forever"), _Reader(self, session_id) as reader:
            self._loop(state, reader, until, _deadline(timeout))
        return state.report

    def run_turn(
        self,
        session_id: str,
        input: str | Sequence[UserMessage | Mapping[str, Any]],
        *,
        output_type: type[Any] | None = None,
        timeout: float | None = None,
    ) -> TurnResult:
        """Send ``input``, serve the calls of the Turn it starts, and return its outcome.

        Subscribes before sending, so no event of the Turn is missed.
        """
        state = SessionState(session_id, ServeReport(session_id))
        deadline = _deadline(timeout)
        with _Reader(self, session_id) as reader:
            self._loop(state, reader, "connected", deadline)
            self.client.sessions.events.create(session_id, events=[input_event(input)])
            # The Turn is created in the same transaction that admits the input.
            latest = self.client.sessions.turns.list(session_id, order="desc", limit=1)
            if not latest.data:
                raise RunnerError(f"Session {session_id} admitted the input but shows no Turn")
            self._core.start_turn(state, latest.data[0].id, latest.data[0].status)
            self._loop(state, reader, "turn", deadline)
        assert state.target_turn is not None
        items: Sequence[object] | None = state.streamed_answer()
        if items is None:
            items = list(self.client.sessions.items.list(session_id, order="asc"))
        text = final_text(items, state.target_turn)
        return TurnResult(
            session_id=session_id,
            turn_id=state.target_turn,
            status=state.target_turn_status or "unknown",
            text=text,
            output=parse_output(text, output_type),
            report=state.report,
        )

    def recover(self, session_id: str) -> ServeReport:
        """One reconciliation pass: resubmit saved results, settle calls in doubt, run
        new pending calls, then return without following the stream."""
        state = SessionState(session_id, ServeReport(session_id))
        inbox: queue.Queue[Message] = queue.Queue()
        self._reconcile(state, inbox)
        while state.busy():
            self._submit(state)
            if state.in_flight:
                message: Message | None = None
                with suppress(queue.Empty):
                    message = inbox.get(timeout=self._core.next_delay(state))
                if message is not None:
                    self._handle(state, message, inbox)
            elif state.delayed or state.unsaved:
                time.sleep(self._core.next_delay(state) or 0)
            if self._core.housekeeping_due(state):
                self._core.housekeep(state)
        self._core.flush_marks(state)
        state.report.final_status = state.status
        return state.report

    def stop(self) -> None:
        """Ask a running ``serve`` to finish its in-flight calls and return.

        Safe to call from a signal handler or another thread.
        """
        self._stopping.set()
        for inbox in list(self._inboxes):
            inbox.put(Wake())

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self._core.close()
        self.store.close()

    def __enter__(self) -> FunctionRunner:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the loop ----------------------------------------------------------------------------

    def _loop(
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
                core.flush_marks(state)
                return
            if step.reconcile:
                self._reconcile(state, reader.inbox)
                continue
            try:
                message: Message | None = reader.inbox.get(timeout=step.wait)
            except queue.Empty:
                message = None
            while message is not None:
                self._handle(state, message, reader.inbox)
                try:
                    message = reader.inbox.get_nowait()
                except queue.Empty:
                    message = None
            self._submit(state)
            if core.housekeeping_due(state):
                core.housekeep(state)

    def _handle(self, state: SessionState, message: Message, inbox: queue.Queue[Message]) -> None:
        if isinstance(message, Received):
            self._start(state, self._core.on_event(state, message.event), inbox)
        elif isinstance(message, Finished):
            self._core.finished(state, message.key, message.event)
        elif isinstance(message, Connected):
            self._reconcile(state, inbox)
        elif isinstance(message, Dropped):
            state.report.reconnects += 1
        elif isinstance(message, Lost):
            self._core.crashed(state, message.key)
        elif isinstance(message, Fatal):
            raise _fatal(state.session_id, message.error)

    def _reconcile(self, state: SessionState, inbox: queue.Queue[Message]) -> None:
        try:
            session = self.client.sessions.retrieve(state.session_id)
        except NotFoundError as exc:
            raise _fatal(state.session_id, exc) from exc
        self._start(state, self._core.on_session(state, session), inbox)
        if state.target_turn is not None:
            turn = self.client.sessions.turns.retrieve(
                state.target_turn, session_id=state.session_id
            )
            self._core.on_turn(state, turn.id, turn.status)

    def _start(self, state: SessionState, jobs: list[Job], inbox: queue.Queue[Message]) -> None:
        for job in jobs:
            self._pool.submit(self._run, job, inbox)

    def _run(self, job: Job, inbox: queue.Queue[Message]) -> None:
        try:
            if job.function.is_async:
                event = asyncio.run(self._core.execute_async(job))
            else:
                event = self._core.execute(job)
        except BaseException:
            # SystemExit or the like inside the function: no result, so the call stays
            # claimed and becomes in doubt; the loop must not wait for it forever.
            inbox.put(Lost(job.call.key))
            raise
        inbox.put(Finished(job.call.key, event))

    def _submit(self, state: SessionState) -> None:
        batches = self._core.take_batches(state)
        while batches:
            batch = batches.pop(0)
            error: Exception | None = None
            try:
                self.client.sessions.events.create(
                    batch.session_id, events=batch.events, idempotency_key=batch.idempotency_key
                )
            except NotFoundError as exc:
                raise _fatal(state.session_id, exc) from exc
            except OpenAgentCoreError as exc:
                error = exc
            batches.extend(self._core.submitted(state, batch, error))

    @contextmanager
    def _signals(self, install: bool) -> Iterator[None]:
        """SIGINT/SIGTERM stop a daemon gracefully: in-flight calls finish and submit."""
        if not install or threading.current_thread() is not threading.main_thread():
            yield
            return

        def handler(signum: int, frame: FrameType | None) -> None:
            logger.info("Received signal %s; finishing in-flight calls", signum)
            self.stop()

        previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)


class _Reader:
    """Follows the live stream in a thread, reconnecting with backoff, into ``inbox``."""

    def __init__(self, runner: FunctionRunner, session_id: str) -> None:
        self.runner = runner
        self.session_id = session_id
        self.inbox: queue.Queue[Message] = queue.Queue()
        self.connected_once = False
        self._stop = threading.Event()
        self._stream: EventStream | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="openagentcore-stream", daemon=True)

    def __enter__(self) -> _Reader:
        self.runner._inboxes.add(self.inbox)
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.runner._inboxes.discard(self.inbox)
        self._stop.set()
        with self._lock:
            if self._stream is not None:
                self._stream.close()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                stream = self._open()
            except Exception as exc:
                self.inbox.put(Fatal(exc))
                return
            if stream is None:
                return
            self.connected_once = True
            self.inbox.put(Connected())
            error: BaseException | None = None
            try:
                for event in stream:
                    self.inbox.put(Received(event))
            except Exception as exc:
                error = exc
            finally:
                stream.close()
            if self._stop.is_set():
                return
            logger.info("Event stream of %s ended (%s); reconnecting", self.session_id, error)
            self.inbox.put(Dropped(error))

    def _sleep(self, seconds: float) -> None:
        self._stop.wait(seconds)

    def _open(self) -> EventStream | None:
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(_reconnectable),
            wait=tenacity.wait_random_exponential(
                multiplier=0.05, max=self.runner.reconnect_max_delay
            ),
            sleep=self._sleep,
            reraise=True,
        )
        for attempt in retrying:
            with attempt:
                if self._stop.is_set():
                    return None
                stream = self.runner.client.sessions.events.stream(self.session_id)
                with self._lock:
                    self._stream = stream
                return stream
        return None  # pragma: no cover - tenacity always returns or raises


def _reconnectable(error: BaseException) -> bool:
    if isinstance(error, APIStatusError):
        return error.status_code >= 500 or error.status_code in (408, 429)
    return isinstance(error, OpenAgentCoreError)


def _fatal(session_id: str, error: BaseException) -> RunnerError:
    if isinstance(error, NotFoundError):
        return RunnerError(
            f"Session {session_id} no longer exists (deleted, or it belongs to another "
            "Project); stop serving it. Its saved results stay in the store."
        )
    if isinstance(error, RunnerError):
        return error
    return RunnerError(f"Cannot serve Session {session_id}: {error}")


def _deadline(timeout: float | None) -> float | None:
    return None if timeout is None else time.monotonic() + timeout
