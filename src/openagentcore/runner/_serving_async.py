"""The public serving API of :class:`AsyncFunctionRunner`, written once.

``_serving_sync.py`` is generated from this file by ``scripts/unasync.py`` (as httpcore
generates its sync code): edit this file, then run ``python scripts/unasync.py``; CI
fails when the generated file is stale. What differs between the drivers (threads or
tasks, how they wait) lives in the primitives they implement.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TypeVar

from .._client import AsyncClient
from ..types import MessageItem
from ._base import RunnerBase, RunnerError, TurnInput, Until, input_event, turn_result
from ._core import ContentKey, Mode, Serve, content_key
from ._effects import PostOutcome, PostResults, ReadSession, SessionOutcome
from ._output import check_output_format
from ._pump import captured
from ._report import ServeReport, TurnOutputT, TurnResult
from ._signals import on_shutdown_signal

__all__ = ["AsyncServing"]

T = TypeVar("T")


class AsyncServing(RunnerBase, abc.ABC):
    """``serve``, ``run_turn`` and ``recover``, and the requests the runner makes."""

    client: AsyncClient

    async def serve(
        self, session_id: str, *, until: Until = "idle", timeout: float | None = None
    ) -> ServeReport:
        """Serve the Session's calls until it is idle or failed with nothing pending
        (``until="forever"``: until :meth:`stop`, SIGINT or SIGTERM).

        Raises :class:`~openagentcore.runner.ServeTimeout` (a ``TimeoutError`` carrying
        the report) when ``timeout`` passes first. However it ends, functions still
        running finish in the background, and their results are saved and posted.
        """
        serve = self._attach(session_id, until)
        signals = (
            on_shutdown_signal(self._stop_from_signal)
            if until == "forever"
            else contextlib.nullcontext()
        )
        try:
            with signals:
                async with self._reader(serve):
                    await self._wait(serve, self._deadline(timeout), interruptible=until == "idle")
        finally:
            self._detach(serve)
        return serve.report

    async def run_turn(
        self,
        session_id: str,
        input: TurnInput,
        *,
        output_type: type[TurnOutputT] | None = None,
        timeout: float | None = None,
    ) -> TurnResult[TurnOutputT]:
        """Send ``input``, serve the calls of the Turn it starts, and return its outcome.

        Subscribes before sending, so no event of the Turn is missed. With
        ``output_type`` (a pydantic model or any type pydantic validates), the answer is
        parsed into :attr:`TurnResult.output`.

        A Turn that waits on a result the server refused cannot end until a person
        settles that call: it is returned as it is, with status ``"waiting"`` and the
        call in ``report.rejected``, instead of being waited out.
        """
        deadline = self._deadline(timeout)
        if output_type is not None:
            with self._time_left(deadline) as options:
                session = await self.client.sessions.retrieve(session_id, **options)
            check_output_format(session.agent.text, output_type)
        serve = self._attach(session_id, "connected")
        try:
            async with self._reader(serve):
                await self._wait(serve, deadline, interruptible=False)
                reconnects = serve.report.reconnects  # before the input is sent
                event = input_event(input)
                key = content_key(event.input[0].content)
                named = self._change_serve(
                    serve, lambda: self._core.expect_turn(serve, reconnects, key)
                )
                with self._time_left(deadline) as options:
                    await self.client.sessions.events.create(session_id, events=[event], **options)
                turn_id, status = None, "queued"
                if named:  # the stream shows the input's Item, with no request
                    await self._wait(serve, deadline, interruptible=False)
                    turn_id = serve.created_turn
                if turn_id is None:
                    turn_id = await self._turn_of_input(session_id, key, deadline)
                    with self._time_left(deadline) as options:
                        turn = await self.client.sessions.turns.retrieve(
                            turn_id, session_id=session_id, **options
                        )
                    status = turn.status
                self._change_serve(
                    serve,
                    lambda: self._core.start_turn(serve, turn_id, status, reconnects, self._now()),
                )
                await self._wait(serve, deadline, interruptible=True)
        finally:
            self._detach(serve)
        items: Sequence[object] | None = serve.streamed_answer()
        if items is None:
            with self._time_left(deadline) as options:
                listed = self.client.sessions.items.list(session_id, order="asc", **options)
                items = [item async for item in listed]
        return turn_result(serve, items, output_type)

    async def _turn_of_input(self, session_id: str, key: ContentKey, deadline: float | None) -> str:
        """The Turn of the newest user Item with the content ``run_turn`` sent: its input
        is admitted with its Items, so the Item names the Turn the input started or
        joined (the newest Turn may be another client's)."""
        with self._time_left(deadline) as options:
            listed = self.client.sessions.items.list(session_id, order="desc", **options)
            async for item in listed:
                if (
                    isinstance(item, MessageItem)
                    and item.role == "user"
                    and content_key(item.content) == key
                ):
                    return item.turn_id
        raise RunnerError(
            f"Session {session_id} admitted the input but its history shows no Item of it"
        )

    async def recover(self, session_id: str, *, timeout: float | None = None) -> ServeReport:
        """One reconciliation pass: resubmit saved results, settle calls in doubt, run
        new pending calls, then return without following the stream."""
        serve = self._attach(session_id, "once")
        try:
            await self._wait(serve, self._deadline(timeout), interruptible=True)
        finally:
            self._detach(serve)
        return serve.report

    def stop(self, *, force: bool = False) -> None:
        """Ask the serves running now to finish their in-flight calls and return.

        With ``force=True`` the running functions are cancelled instead of awaited:
        coroutine functions get ``CancelledError``, plain ones see ``ctx.cancelled``;
        a function that stops that way gets a failed "cancelled" result, not "in doubt".

        Serves started later are not affected. Safe to call from another thread.
        """
        self._send_stop(force)

    # -- the requests effects make ------------------------------------------------------

    async def _post(self, effect: PostResults) -> PostOutcome:
        with captured() as answer:
            await self.client.sessions.events.create(**effect.batch.request)
        return PostOutcome(effect.batch, answer.error)

    async def _read(self, effect: ReadSession) -> SessionOutcome:
        sessions, turn_id = self.client.sessions, effect.turn_id
        session = turn = None
        with captured() as answer:
            session = await sessions.retrieve(effect.session_id)
            if turn_id is not None:
                turn = await sessions.turns.retrieve(turn_id, session_id=effect.session_id)
        return SessionOutcome(effect.session_id, session, turn, answer.error)

    # -- what each driver provides --------------------------------------------------------

    @abc.abstractmethod
    def _attach(self, session_id: str, until: Mode) -> Serve:
        """Attach a serve to the core (starting the pump if need be)."""

    @abc.abstractmethod
    def _detach(self, serve: Serve) -> None:
        """The serve ended, however it ended."""

    @abc.abstractmethod
    def _reader(self, serve: Serve) -> AbstractAsyncContextManager[None]:
        """Follow the serve's live stream while the block runs."""

    @abc.abstractmethod
    async def _wait(self, serve: Serve, deadline: float | None, *, interruptible: bool) -> None:
        """Wait for the pump's verdict on ``serve``; past ``deadline``, raise
        :class:`ServeTimeout` after a grace. ``interruptible``: the first Ctrl-C lets
        running calls finish, the second exits (where the driver sees Ctrl-C)."""

    @abc.abstractmethod
    def _change_serve(self, serve: Serve, change: Callable[[], T]) -> T:
        """Apply ``change`` to the core (it changes what ``serve`` waits for) and give
        the serve a fresh verdict: one judged before the change is spent."""

    @abc.abstractmethod
    def _send_stop(self, force: bool) -> None:
        """Tell the pump to stop the serves attached now."""

    @abc.abstractmethod
    def _stop_from_signal(self) -> None:
        """``stop()`` from a signal handler."""
