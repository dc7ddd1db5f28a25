"""The runner core's Session and serve tracker: what each serve waits for, what the
server shows of each Session (stream events and reads), and when a serve may end.

Calls the server announces are handed to the call machine (:meth:`ServeTracker._consider`,
in :mod:`._calls`); Turns found over stop their calls.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Iterable

import httpx

from .._errors import (
    APIConnectionError,
    APIError,
    APIStatusError,
    ConflictError,
    NotFoundError,
)
from .._retry import is_retryable_status
from ..store import CallKey, CallState
from ..types import (
    FunctionCallAction,
    FunctionCallItem,
    FunctionCallOutputItem,
    ItemAddedEvent,
    ItemDoneEvent,
    MessageItem,
    RequiredAction,
    Session,
    SessionEvent,
    SessionSnapshotEvent,
    TerminalTurnEvent,
)
from ._core_base import (
    IDLE_PHASES,
    NOT_STARTED,
    Call,
    ContentKey,
    Mode,
    Serve,
    SessionView,
    turn_over,
)
from ._effects import (
    CancelFunction,
    Outcome,
    ReadSession,
    ReportAction,
    SessionOutcome,
)
from ._housekeeping import Housekeeping
from ._phases import Phase
from ._report import ServeReport
from ._types import PendingCall, RunnerError

__all__ = ["ServeTracker", "content_key", "heeds"]

#: A Session that cannot be read is logged at most once in this many seconds.
READ_WARN_EVERY = 30.0

#: Remember this many non-function actions already reported, per Session.
_REPORTED_ACTIONS_LIMIT = 1024

_TERMINAL_STATUSES = frozenset({"idle", "failed"})

_TURN_ENDED = frozenset({"completed", "failed", "cancelled", "incomplete"})

#: The modes of ``run_turn``, whose serve keeps what the stream shows of each Turn.
_TURN_MODES = frozenset({"connected", "created", "turn"})


#: Phases of a call whose function has not ended: a Turn found over stops them.
_UNANSWERED = NOT_STARTED | {Phase.WAITING, Phase.TAKING_OVER, Phase.QUEUED, Phase.RUNNING}


class ServeTracker(Housekeeping, abc.ABC):
    """Serves attached to Sessions, and what the server shows of those Sessions."""

    def attach(self, session_id: str, until: Mode, now: float) -> Serve:
        """Start tracking a serve; ``once`` (``recover``) reads the Session right away,
        the others when their stream connects."""
        self._last_serve_id += 1
        serve = Serve(self._last_serve_id, session_id, until, ServeReport(session_id))
        self.serves[serve.id] = serve
        self._serves_by_session.setdefault(session_id, {})[serve.id] = serve
        self._touched[session_id] = None
        view = self._view(session_id)
        if until == "once":
            self._want_read(view, now)
        return serve

    def detach(self, serve: Serve, now: float, *, grace: bool = False) -> None:
        """The serve ended, however it ended. Running functions go on and their results
        are saved and posted in the background; claims nobody will run are released.

        With ``grace`` (the serve ran out of time and waits for what it started to
        settle), its report still counts what happens to the Session's calls until the
        serve is detached again.
        """
        if grace:
            self._in_grace[serve.id] = serve
        else:
            self._in_grace.pop(serve.id, None)
        if self._marks:
            self._marks_due = min(self._marks_due, now)  # nobody may wait to batch more
        was_attached = self.serves.pop(serve.id, None) is not None
        attached = self._serves_by_session.get(serve.session_id, {})
        attached.pop(serve.id, None)
        if not attached:
            self._serves_by_session.pop(serve.session_id, None)
        self._release_unrun(serve.session_id, now)
        view = self._view(serve.session_id)
        if was_attached and serve.connected and attached:
            # Its stream's last snapshot may be older than one another stream brought
            # (each stream keeps its own order, not the others'), and no later event of
            # that stream will correct it: the serves left read the Session again.
            self._want_read(view, now)
        if not self._serves_of(serve.session_id):
            for call in list(view.calls.values()):
                if call.phase is Phase.DONE:
                    self._forget(call)
            if not view.calls:
                del self._sessions[serve.session_id]

    @property
    def last_serve_id(self) -> int:
        return self._last_serve_id

    def stop(self, last_serve: int, *, force: bool = False) -> None:
        """Ask the serves attached up to ``last_serve`` (those running when ``stop()``
        was called, not later ones) to finish what they started; with ``force``, their
        running functions are asked to stop too (cancelled)."""
        self._touched_all = True
        for serve in self.serves.values():
            if serve.id > last_serve:
                continue
            self.stop_serve(serve)
            if force:
                for call in self._calls_of(serve.session_id):
                    self._ask_to_stop(call)

    def stop_serve(self, serve: Serve) -> None:
        """Let ``serve`` return once the calls of its Session now in flight are done."""
        if not serve.stopping:
            serve.stopping = True
            serve.finishing = frozenset(self._view(serve.session_id).unsettled)
            self._touched[serve.session_id] = None

    def expect_turn(self, serve: Serve, reconnects: int, input_key: ContentKey) -> bool:
        """``run_turn`` is about to send its input, whose first message has the content
        ``input_key``; ``reconnects`` is the count now.

        Whether the stream can name the Turn the input lands in, saving a request: the
        input's first message becomes a user Item of that Turn (the one it started, or
        the running one it joined), streamed as ``item.added``. The serve then waits
        (mode ``created``) for that Item, or for a reconnect, after which the caller
        looks the Item up in the Session's history instead.
        """
        serve.reconnects_at_turn_start = reconnects
        serve.created_turn = None
        serve.input_key = input_key
        if serve.connected:
            serve.until = "created"
        return serve.until == "created"

    def start_turn(
        self, serve: Serve, turn_id: str, status: str, reconnects: int, now: float
    ) -> None:
        """``run_turn`` learned the Turn its input started, and waits for its end. Its
        events may already have come through the stream (they were kept by Turn);
        ``reconnects`` is the count before the input was sent."""
        serve.until = "turn"
        serve.target_turn = turn_id
        serve.target_turn_status = serve.ends_by_turn.get(turn_id, status)
        serve.reconnects_at_turn_start = reconnects
        if serve.report.reconnects != reconnects:
            # The stream dropped after the input went out: the read on reconnect could
            # not ask for this Turn, which had no name yet, and its end (a cancel) may
            # have passed unseen. Only a read of the Turn tells.
            self._want_read(self._view(serve.session_id), now)

    def serves_to_judge(self) -> list[Serve]:
        """The serves that may have become able to return since this was last asked:
        those of the Sessions touched since (all of them after a change any serve may
        wait on). A serve nothing touched stays as it was judged."""
        if self._touched_all:
            serves = list(self.serves.values())
            self._reads_all = True
        else:
            self._reads_stale.update(self._touched)
            by_session = self._serves_by_session
            serves = [
                serve
                for session_id in self._touched
                for serve in by_session.get(session_id, {}).values()
            ]
        self._touched.clear()
        self._touched_all = False
        return serves

    def touch(self, session_id: str | None = None) -> None:
        """Have the next round judge the serves of ``session_id`` (``None``: all): their
        driver changed them, or news about their Session arrived."""
        if session_id is None:
            self._touched_all = True
        else:
            self._touched[session_id] = None

    def finished(self, serve: Serve, now: float) -> bool:
        """Whether ``serve`` may return now. Raises the serve's fatal error, if any."""
        if not self.may_finish(serve):
            return False
        if serve.until in ("connected", "created"):
            return True
        if self._marks_outstanding(serve.session_id):
            if not self._marks_writing and not self._marks_failed:
                self._flush_marks(now)
            return False
        serve.report.final_status = self._view(serve.session_id).status
        refused = self._refused_in_turn(serve) if serve.until == "turn" else []
        if refused and serve.target_turn_status not in _TURN_ENDED:
            serve.target_turn_status = "waiting"
            for key in refused:  # refused before this serve attached, too
                if key not in serve.report.rejected:
                    serve.report.rejected.append(key)
        return True

    def may_finish(self, serve: Serve) -> bool:
        """Whether ``serve`` has what it waits for, but perhaps the writing of its
        Session's progress marks; changes nothing. Raises the serve's fatal error."""
        if serve.fatal is not None:
            raise serve.fatal
        if serve.until == "connected":
            # And read once: ``run_turn`` must know whether the Session is idle.
            return serve.connected and serve.read_once
        if serve.until == "created":
            dropped = serve.report.reconnects != serve.reconnects_at_turn_start
            return serve.created_turn is not None or dropped
        return self._settled(serve)

    def _refused_in_turn(self, serve: Serve) -> list[CallKey]:
        """The refused results ``run_turn``'s Turn waits on: it cannot end until a person
        settles them, so it is returned as it is, not waited out."""
        view = self._view(serve.session_id)
        return [
            key
            for key, seen in view.refused.items()
            if key.turn_id == serve.target_turn and key in view.pending and view.snapshots > seen
        ]

    def settling(self, session_id: str | None = None) -> bool:
        """Whether calls (of one Session, or any) still need this runner, counting the
        progress marks of results already posted: a serve out of time or a runner
        closing waits for these too, so the store is final when it returns."""
        if session_id is None:
            # Results posted as they were saved count until their save is answered:
            # their progress marks are queued only then.
            return (
                self.busy() or bool(self._marks) or self._marks_writing or bool(self._saving_posted)
            )
        return self.busy(session_id) or self._marks_outstanding(session_id)

    def busy(self, session_id: str | None = None) -> bool:
        """Whether calls (of one Session, or any) still need this runner."""
        if session_id is not None:
            view = self._sessions.get(session_id)
            return view is not None and bool(view.unsettled)
        return any(view.unsettled for view in self._sessions.values())

    def _settled(self, serve: Serve) -> bool:
        view = self._view(serve.session_id)
        if serve.until == "once":
            # One pass: a call not even looked at because the store is down is left
            # for the next pass (and counted in ``store_errors``), not waited for.
            if not serve.read_once or view.reading:
                return False
            return not any(  # ``unsettled``: the calls not in an idle phase
                not (call.phase in NOT_STARTED and call.retry is not None)
                for call in map(view.calls.__getitem__, view.unsettled)
            )
        if view.read_at is not None or view.reading:
            return False
        if serve.stopping:
            # Calls announced since belong to the Session's other serves (a stopped
            # serve leaves new calls to them, or pending): waiting for them could last
            # as long as those serves keep the Session busy.
            return not view.unsettled & serve.finishing
        if self.busy(serve.session_id):
            return False
        if serve.until == "forever":
            return False
        if serve.until == "turn":
            return serve.target_turn_status in _TURN_ENDED or bool(self._refused_in_turn(serve))
        if view.status == "requires_action":
            # Waiting only on what this runner cannot do (other functions, approvals,
            # an Environment): serving longer would change nothing.
            return view.pending <= view.not_mine
        return view.status in _TERMINAL_STATUSES

    def on_connected(self, serve: Serve, now: float) -> None:
        """The serve's stream (re)opened: what it missed is in a fresh Session read."""
        self._touched[serve.session_id] = None
        serve.connected = True
        self._want_read(self._view(serve.session_id), now)

    def on_dropped(self, serve: Serve) -> None:
        self._touched[serve.session_id] = None
        serve.report.reconnects += 1

    def on_stream_failed(self, serve: Serve, error: Exception) -> None:
        """The stream cannot be opened again: the serve ends with an error."""
        self._touched[serve.session_id] = None
        if isinstance(error, NotFoundError):
            self._session_gone(serve.session_id, error)
            return
        serve.fatal = RunnerError(f"Cannot serve Session {serve.session_id}: {error}")
        serve.fatal.__cause__ = error

    def on_event(self, serve: Serve, event: SessionEvent, now: float) -> None:
        """One live stream event of ``serve``'s Session (drivers pass only those it
        ``heeds``)."""
        self._touched[serve.session_id] = None
        if isinstance(event, SessionSnapshotEvent):
            self._view(serve.session_id).snapshots_streamed += 1
            self._on_session(serve.session_id, event.session, now)
            return
        if isinstance(event, (ItemAddedEvent, ItemDoneEvent)):
            item = event.item
            if isinstance(item, FunctionCallOutputItem):
                self._on_output(CallKey(serve.session_id, item.turn_id, item.call_id), now)
            elif isinstance(item, MessageItem) and item.role == "user":
                if (
                    serve.until == "created"
                    and serve.created_turn is None
                    and content_key(item.content) == serve.input_key
                ):
                    serve.created_turn = item.turn_id or event.turn_id
            elif (
                isinstance(item, MessageItem)
                and isinstance(event, ItemDoneEvent)
                and item.turn_id is not None
                and serve.until in _TURN_MODES
            ):
                serve.messages_by_turn.setdefault(item.turn_id, []).append(item)
            elif isinstance(item, FunctionCallItem) and _is_complete_call(event, item):
                turn_id = item.turn_id or event.turn_id
                if turn_id:
                    self._consider(PendingCall.from_item(serve.session_id, turn_id, item), now)
            return
        if isinstance(event, TerminalTurnEvent):
            turn = getattr(event, "turn", None)
            status = getattr(turn, "status", None) or _terminal_status(event)
            if status == "cancelled":
                self._cancel_turn(serve.session_id, event.turn_id, now)
            if serve.until in _TURN_MODES:
                serve.ends_by_turn[event.turn_id] = status
            if event.turn_id == serve.target_turn:
                serve.target_turn_status = status

    def _cancel_turn(self, session_id: str, turn_id: str, now: float) -> None:
        """The Turn was cancelled: its running functions are asked to stop, and its
        claims whose functions have not started are given back: they never run."""
        self._view(session_id).cancelled_turns.add(turn_id)
        self._stop_turn(session_id, turn_id, now)

    def _stop_turn(self, session_id: str, turn_id: str, now: float) -> None:
        """The Turn takes no more results: stop its functions, give back its claims."""
        for call in self._calls_of(session_id):
            if call.key.turn_id != turn_id:
                continue
            if call.phase is Phase.RUNNING:
                self._ask_to_stop(call)
            elif call.phase is Phase.QUEUED:
                self._give_back(call, now)
            elif call.phase is Phase.WAITING:
                self._done(call, Outcome.RELEASED)  # never claimed: nothing to give back

    def _ask_to_stop(self, call: Call) -> None:
        """Ask ``call``'s running function to stop, once per attempt: a call run again
        here after an attempt that was asked must be asked again."""
        if call.phase is Phase.RUNNING and call.cancelled_attempt != call.attempts:
            call.cancelled_attempt = call.attempts
            self._effects.append(CancelFunction(call.key))

    def on_session_read(self, answer: SessionOutcome, now: float) -> None:
        self._touched[answer.session_id] = None
        view = self._view(answer.session_id)
        view.reading = False
        if answer.error is not None:
            if isinstance(answer.error, NotFoundError):
                self._session_gone(answer.session_id, answer.error)
                return
            # The server could not be read: try again after a poll interval, saying so
            # once in a while, not at every try.
            if now - view.read_warned_at >= READ_WARN_EVERY:
                view.read_warned_at = now
                self._say(
                    logging.WARNING,
                    "Could not read Session %s from %s: %s (trying again every %g s%s)",
                    answer.session_id,
                    _url_of(answer.error),
                    answer.error,
                    self.poll_interval,
                    ""
                    if self.unreachable_timeout is None
                    else f"; a serve that must end gives up after {self.unreachable_timeout:g} s",
                )
            view.read_at = now + self.poll_interval
            self._server_failing(view, answer.error, now)
            return
        view.unreachable_since = None
        assert answer.session is not None
        if answer.turn is not None and answer.turn.status == "cancelled":
            self._cancel_turn(answer.session_id, answer.turn.id, now)
        if answer.session.status in _TERMINAL_STATUSES:
            self._on_turns_ended(view, now)
        for serve in self._serves_of(answer.session_id):
            if (
                answer.turn is not None
                and answer.turn.id == serve.target_turn
                and serve.target_turn_status not in _TURN_ENDED
            ):
                # An ended Turn stays ended: a read sent before its end event came
                # through the stream must not make the serve wait for that end again.
                serve.target_turn_status = answer.turn.status
            serve.read_once = True
        if view.snapshots_streamed == view.snapshots_when_read:
            self._on_session(answer.session_id, answer.session, now, read=True)

    def _on_turns_ended(self, view: SessionView, now: float) -> None:
        """A read shows the Session idle (or failed): no Turn is open, so every Turn
        whose call this runner knew of before the read was sent has ended, however its
        end reached the server (a cancel while the stream was down, say). Those calls
        are no longer required: running ones are asked to stop, claims not started are
        given back. Only a read sent after the call was known proves it; an older read
        may show the Session idle from before the call's Turn began."""
        for call in self._calls_of(view.session_id):
            turn_id = call.key.turn_id
            if call.known_at_read >= view.reads_sent or turn_over(view, turn_id):
                continue
            if call.phase in _UNANSWERED:
                self._say(
                    logging.INFO,
                    "Turn %s of Session %s ended while call %s was not answered; it is "
                    "no longer required and will not run (or is asked to stop)",
                    turn_id,
                    view.session_id,
                    call.key.call_id,
                )
                view.ended_turns.add(turn_id)
                self._stop_turn(view.session_id, turn_id, now)

    def _server_failing(self, view: SessionView, error: Exception, now: float) -> None:
        """A read or a POST of the Session failed. Serves that must end (all but
        ``forever``) end with the error at once when retrying cannot help (the key or the
        URL is refused, or the client could not even build the request), and after
        ``unreachable_timeout`` seconds of failures otherwise."""
        if isinstance(error, APIConnectionError):
            self._unreachable(view, error, now)
            return
        hopeless = not isinstance(error, APIError) or (
            isinstance(error, APIStatusError)
            and not is_retryable_status(error.status_code)
            and not isinstance(error, ConflictError)
        )
        if view.unreachable_since is None:
            view.unreachable_since = now
        down = now - view.unreachable_since
        if hopeless:
            self._end_serves(view, error)
        elif self.unreachable_timeout is not None and down >= self.unreachable_timeout:
            fatal = RunnerError(
                f"The server at {_url_of(error)} kept failing for {down:.0f} s ({error}); "
                "check that base_url points at the Agents API and that the server is healthy"
            )
            fatal.__cause__ = error
            self._end_serves(view, fatal)

    def _end_serves(self, view: SessionView, error: Exception) -> None:
        for serve in self._serves_of(view.session_id):
            if serve.until != "forever" and serve.fatal is None:
                serve.fatal = error

    def _unreachable(self, view: SessionView, error: APIConnectionError, now: float) -> None:
        """Serves that must end (all but ``forever``) give up on a server that could not
        be reached for ``unreachable_timeout`` seconds, with an error naming its URL."""
        if view.unreachable_since is None:
            view.unreachable_since = now
        down = now - view.unreachable_since
        if self.unreachable_timeout is None or down < self.unreachable_timeout:
            return
        url = _url_of(error)
        fatal = APIConnectionError(
            request=error.request,
            message=f"Cannot reach {url} (tried for {down:.0f} s: {error}); check "
            "base_url or OPENAGENTCORE_BASE_URL and that the server is running",
        )
        fatal.__cause__ = error
        self._end_serves(view, fatal)

    def _on_session(
        self, session_id: str, session: Session, now: float, *, read: bool = False
    ) -> None:
        """Reconcile against a Session snapshot (``read``: from a read of it, not from the
        stream): its ``required_actions`` are the truth."""
        view = self._view(session_id)
        view.status = session.status
        view.last_read = now
        pending: list[PendingCall] = []
        for action in session.required_actions:
            if isinstance(action, FunctionCallAction):
                pending.append(PendingCall.from_action(session_id, action))
            else:
                self._report_action(view, action)
        view.pending = frozenset(call.key for call in pending)
        view.not_mine &= view.pending
        view.snapshots += 1
        view.refused = {key: n for key, n in view.refused.items() if key in view.pending}
        # Forget settled calls the server no longer waits on: memory stays bounded.
        for call in list(view.calls.values()):
            if call.phase in IDLE_PHASES and call.key not in view.pending:
                self._forget(call)
        for waiting in pending:
            self._consider(waiting, now, read=read)

    def _on_output(self, key: CallKey, now: float) -> None:
        """An output Item proves our result applied only once the server accepted it.
        The Item may come through the stream before the POST's answer does."""
        call = self.calls.get(key)
        if call is None:
            return
        if call.phase is Phase.POSTED:
            self._queue_mark(key, CallState.APPLIED, now)
            self._done(call, Outcome.APPLIED)
        elif call.phase is Phase.POSTING:
            call.output_seen = True

    def _session_gone(self, session_id: str, error: Exception) -> None:
        message = (
            f"Session {session_id} no longer exists (deleted, or it belongs to another "
            "Project); stop serving it. Its saved results stay in the store."
        )
        if isinstance(error, NotFoundError) and error.route_missing:
            # Not the API saying the Session is gone: base_url names no API route.
            message = f"Cannot serve Session {session_id}: {error.message}"
        for serve in self._serves_of(session_id):
            serve.fatal = RunnerError(message)
            serve.fatal.__cause__ = error
        for call in self._calls_of(session_id):
            if call.phase in (Phase.READY, Phase.BACKOFF):
                self._done(call, Outcome.SESSION_GONE)

    def _report_action(self, view: SessionView, action: RequiredAction) -> None:
        ident = getattr(action, "request_id", None) or getattr(action, "environment_id", None)
        ident = f"{action.type}:{ident}"
        if ident in view.reported_actions:
            return
        view.reported_actions[ident] = None
        if len(view.reported_actions) > _REPORTED_ACTIONS_LIMIT:
            view.reported_actions.popitem(last=False)
        if self.action_hook:
            self._effects.append(ReportAction(view.session_id, action))
        else:
            self._say(
                logging.INFO,
                "Session %s requires a %s action; this runner only serves function calls",
                view.session_id,
                action.type,
            )

    def _release_unrun(self, session_id: str, now: float) -> None:
        """Claims of a Session no serve follows any more, whose functions never started."""
        if self._serves_of(session_id):
            return
        for call in self._calls_of(session_id):
            if call.phase is Phase.QUEUED:
                self._give_back(call, now)
            elif call.phase is Phase.WAITING or (
                call.phase in NOT_STARTED and call.retry is not None
            ):
                self._done(call, Outcome.ABANDONED_BY_SERVE)

    def _next_read(self, view: SessionView, serves: Iterable[Serve]) -> float | None:
        """When the Session should be read next, if at all (only Sessions with serves
        are ever read)."""
        if view.reading or all(serve.until == "once" and serve.read_once for serve in serves):
            return None  # one pass (recover) is done
        if view.read_at is not None:
            return view.read_at
        # While the Session waits on calls other workers hold, no event may come for a
        # long time; reading it now and then notices a worker that died.
        if view.status == "requires_action" and not self.busy(view.session_id):
            return view.last_read + self.poll_interval
        return None

    def _refresh_reads(self) -> None:
        """Bring ``_next_reads`` up to date for the Sessions touched since."""
        if self._reads_all or self._touched_all:
            self._next_reads.clear()
            stale: Iterable[str] = list(self._serves_by_session)
        else:
            stale = [*self._reads_stale, *self._touched]
        for session_id in stale:
            serves = self._serves_by_session.get(session_id)
            read_at = (
                None if serves is None else self._next_read(self._view(session_id), serves.values())
            )
            if read_at is None:
                self._next_reads.pop(session_id, None)
            else:
                self._next_reads[session_id] = read_at
        self._reads_stale.clear()
        self._reads_all = False

    def _reads_due(self, now: float) -> None:
        """Send the Session reads due now (only Sessions with serves are read)."""
        self._refresh_reads()
        due = [session_id for session_id, at in self._next_reads.items() if at <= now]
        for session_id in due:
            serves = self._serves_by_session[session_id]
            view = self._view(session_id)
            view.reading = True
            view.read_at = None
            view.snapshots_when_read = view.snapshots_streamed
            view.reads_sent += 1
            turn = next((s.target_turn for s in serves.values() if s.target_turn), None)
            self._effects.append(ReadSession(session_id, turn))
            del self._next_reads[session_id]  # read now: not again before its answer

    def _read_wakeups(self, due: list[float]) -> None:
        """Add when each served Session is read next to ``due``."""
        self._refresh_reads()
        if self._next_reads:
            due.append(min(self._next_reads.values()))

    @abc.abstractmethod
    def _consider(self, pending: PendingCall, now: float, *, read: bool = False) -> None:
        """Decide a call the server announced (the call machine's entry); ``read``: a
        Session snapshot listed it, rather than the stream announcing it as it came."""


def _terminal_status(event: TerminalTurnEvent) -> str:
    """``completed`` from ``agent.session.turn.completed``, when the event has no Turn."""
    kind: str = getattr(event, "type", "")
    return kind.rsplit(".", 1)[-1]


def content_key(parts: Iterable[object]) -> ContentKey:
    """The content of a message as sent (``UserMessage.content``) or as stored (a user
    Item's ``content``), in a form the two compare equal by."""
    key: list[tuple[str, str]] = []
    for part in parts:
        kind = str(getattr(part, "type", ""))
        value = getattr(part, "text", None)
        if value is None:
            value = getattr(part, "image_url", "")
        key.append((kind, str(value)))
    return tuple(key)


def heeds(event: SessionEvent) -> bool:
    """Whether :meth:`RunnerCore.on_event` may act on ``event``. Drivers hand the core
    only these: text deltas, content parts, a Turn starting, a call whose arguments are
    still streaming change nothing, and a round for each would cost as much as a call's."""
    if isinstance(event, (SessionSnapshotEvent, TerminalTurnEvent)):
        return True
    if isinstance(event, (ItemAddedEvent, ItemDoneEvent)):
        item = event.item
        if isinstance(item, FunctionCallItem):
            return _is_complete_call(event, item)
        if isinstance(item, MessageItem):
            return isinstance(event, ItemDoneEvent) or item.role == "user"
        return isinstance(item, FunctionCallOutputItem)
    return False


def _is_complete_call(event: ItemAddedEvent | ItemDoneEvent, item: FunctionCallItem) -> bool:
    """A call can run once its arguments are final: on ``item.done``, or an
    ``item.added`` that already reads completed."""
    return isinstance(event, ItemDoneEvent) or item.status == "completed"


def _url_of(error: Exception) -> str:
    """The URL a failed request went to, without credentials or query, to name in logs."""
    request = getattr(error, "request", None)
    if not isinstance(request, httpx.Request):
        return "the server"
    return str(request.url.copy_with(username=None, password=None, query=None))
