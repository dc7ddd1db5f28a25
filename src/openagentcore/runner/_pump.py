"""What both drivers do between effects: route messages into the core, judge serves.

The drivers differ only in how they wait and where effects run (threads or tasks);
everything that decides lives in :class:`RunnerCore` and here, written once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import httpx

from .._errors import APIConnectionError, APIStatusError, OpenAgentCoreError
from .._retry import is_retryable_status
from ..types import SessionEvent
from ._core import RunnerCore
from ._effects import (
    AskInDoubt,
    CancelFunction,
    ClaimCall,
    Effect,
    FunctionOutcome,
    InDoubtAnswer,
    PostOutcome,
    PostResults,
    ReadSession,
    ReportAction,
    RunFunction,
    SessionOutcome,
    StoreAnswer,
    StoreEffect,
    Verdict,
    perform_store,
)
from ._json import encode_output
from ._types import ActionHandler, InDoubtCall, InDoubtHandler, RunnerError

# Drivers use this module as their one vocabulary (``from . import _pump as pump``):
# the messages they feed, the effects they carry out, and the helpers both share.
__all__ = [
    "AskInDoubt",
    "CancelFunction",
    "ClaimCall",
    "FunctionOutcome",
    "PostResults",
    "ReadSession",
    "ReportAction",
    "RunFunction",
    "perform_store",
    "Connected",
    "Dropped",
    "Message",
    "Reconnect",
    "Received",
    "Round",
    "Stop",
    "StoreAnswer",
    "StoreEffect",
    "StreamFailed",
    "Wake",
    "Captured",
    "Carrier",
    "ask_in_doubt",
    "captured",
    "carry",
    "feed",
    "judge",
    "reconnectable",
    "report_action",
    "run_round",
]

if TYPE_CHECKING:
    from ._observe import CallObserver

logger = logging.getLogger("openagentcore.runner")


@dataclass(frozen=True, slots=True)
class Connected:
    """A serve's stream (re)opened: reconcile against a fresh Session read."""

    serve_id: int


@dataclass(frozen=True, slots=True)
class Dropped:
    serve_id: int


@dataclass(frozen=True, slots=True)
class StreamFailed:
    """The stream cannot be opened again (e.g. the Session is gone)."""

    serve_id: int
    error: Exception


@dataclass(frozen=True, slots=True)
class Received:
    serve_id: int
    event: SessionEvent


@dataclass(frozen=True, slots=True)
class Stop:
    """``stop()`` was called: serves attached up to ``last_serve`` finish (with
    ``force``, their running functions are cancelled)."""

    last_serve: int
    force: bool = False


@dataclass(frozen=True, slots=True)
class Wake:
    """Nothing happened; look again (a serve attached, detached or timed out)."""


Message = (
    Connected
    | Dropped
    | StreamFailed
    | Received
    | Stop
    | Wake
    | StoreAnswer
    | FunctionOutcome
    | PostOutcome
    | SessionOutcome
    | InDoubtAnswer
)


def feed(core: RunnerCore, message: Message, now: float) -> None:
    """Hand one message to the core."""
    if isinstance(message, StoreAnswer):
        core.on_store_answer(message, now)
    elif isinstance(message, FunctionOutcome):
        core.on_function_done(message, now)
    elif isinstance(message, PostOutcome):
        core.on_posted(message, now)
    elif isinstance(message, SessionOutcome):
        core.on_session_read(message, now)
    elif isinstance(message, InDoubtAnswer):
        core.on_in_doubt_answer(message, now)
    elif isinstance(message, Stop):
        core.stop(message.last_serve, force=message.force)
    elif isinstance(message, Wake):
        core.touch()  # a driver attached, detached or changed a serve
    else:
        serve = core.serves.get(message.serve_id)
        if serve is None:
            # The serve ended; of its stream's last words only a Turn's cancel matters.
            if isinstance(message, Received):
                core.on_late_event(message.event, now)
            return
        if isinstance(message, Received):
            core.on_event(serve, message.event, now)
        elif isinstance(message, Connected):
            core.on_connected(serve, now)
        elif isinstance(message, Dropped):
            core.on_dropped(serve)
        elif isinstance(message.error, APIConnectionError):
            # The server stayed unreachable past ``unreachable_timeout`` (see Reconnect):
            # the serve raises that, naming the URL, rather than a generic RunnerError.
            serve.fatal = message.error
            core.touch(serve.session_id)
        else:
            core.on_stream_failed(serve, message.error)


@dataclass(frozen=True, slots=True)
class Round:
    """What one round of the pump decided: verdicts on serves, and effects to carry out."""

    verdicts: dict[int, BaseException | None]
    effects: list[Effect]


def run_round(
    core: RunnerCore, observer: CallObserver | None, messages: Sequence[Message], now: float
) -> Round:
    """Feed ``messages`` to the core, judge its serves and take its effects: the one
    step every driver (and the simulator) repeats, whatever thread or task runs it."""
    for message in messages:
        feed(core, message, now)
    verdicts = judge(core, now)
    effects = core.take_effects(now)
    notes = core.take_notes()
    if observer is not None:
        observer.observe(notes, now, messages=messages, effects=effects)
    return Round(verdicts, effects)


class Carrier(Protocol):
    """How a driver (or the simulator) starts each kind of effect but store calls,
    which :func:`carry` hands back: each driver runs those its own way. The methods are
    private: drivers implement them, nothing else calls them."""

    def _run_function(self, effect: RunFunction) -> None: ...

    def _cancel_function(self, effect: CancelFunction) -> None: ...

    def _post_results(self, effect: PostResults) -> None: ...

    def _read_session(self, effect: ReadSession) -> None: ...

    def _ask_in_doubt(self, effect: AskInDoubt) -> None: ...

    def _report_action(self, effect: ReportAction) -> None: ...


def carry(carrier: Carrier, effects: Iterable[Effect]) -> list[StoreEffect]:
    """Start ``effects`` in the core's order; return the store calls among them."""
    store_calls: list[StoreEffect] = []
    for effect in effects:
        if isinstance(effect, RunFunction):
            carrier._run_function(effect)
        elif isinstance(effect, CancelFunction):
            carrier._cancel_function(effect)
        elif isinstance(effect, PostResults):
            carrier._post_results(effect)
        elif isinstance(effect, ReadSession):
            carrier._read_session(effect)
        elif isinstance(effect, AskInDoubt):
            carrier._ask_in_doubt(effect)
        elif isinstance(effect, ReportAction):
            carrier._report_action(effect)
        else:
            store_calls.append(effect)
    return store_calls


def judge(core: RunnerCore, now: float) -> dict[int, BaseException | None]:
    """The serves that may return now: ``None`` for a clean finish, or the error to
    raise in the serve's caller. Only serves whose Sessions were touched since the last
    judgement are looked at (the simulator checks that no other serve could return)."""
    verdicts: dict[int, BaseException | None] = {}
    for serve in core.serves_to_judge():
        try:
            if core.finished(serve, now):
                verdicts[serve.id] = None
        except Exception as exc:  # the serve's fatal error, raised in its caller
            verdicts[serve.id] = exc
    return verdicts


class Captured:
    """What :func:`captured` caught: the request's error, if any."""

    error: Exception | None = None


@contextmanager
def captured() -> Iterator[Captured]:
    """Catch the error of the requests in the block, whatever it is: drivers hand it to
    the core, which decides what it means. An answer must never be lost, or its call
    or Session read would wait for ever."""
    outcome = Captured()
    try:
        yield outcome
    except Exception as exc:
        if not isinstance(exc, OpenAgentCoreError):
            logger.warning("A request failed unexpectedly: %r", exc)
        outcome.error = exc


def report_action(hook: ActionHandler, effect: ReportAction) -> None:
    """Run the application's ``on_action`` hook; what it raises is logged."""
    try:
        hook(effect.session_id, effect.action)
    except Exception:
        logger.exception("on_action raised; ignoring it")


def reconnectable(error: BaseException) -> bool:
    """Whether opening the stream is worth trying again."""
    if isinstance(error, APIStatusError):
        return is_retryable_status(error.status_code)
    return isinstance(error, OpenAgentCoreError)


class Reconnect:
    """When a serve opens its stream again, and when it gives up: decided here, with
    no I/O and on the runner's clock, so both drivers and the simulator share it.

    An outage lasts from the first failure until a stream delivers an event. A server
    that accepts the stream and ends it at once (a web page served for every path, a
    proxy's error page with status 200) is therefore backed off like one that refuses
    it, instead of being asked again at once. Each delay is at least half its cap, so
    a failing server is asked at a bounded rate. A serve that must end (``limit``
    seconds) gives up once the outage lasts that long, whatever the error; one with
    ``until="forever"`` (``limit`` is ``None``) keeps trying. It logs a WARNING naming
    the URL once the outage lasts ``WARN_AFTER`` seconds and every ``WARN_EVERY``
    seconds after.
    """

    WARN_AFTER = 5.0
    WARN_EVERY = 30.0
    FIRST_DELAY = 0.05

    def __init__(
        self,
        base_url: httpx.URL,
        limit: float | None,
        max_delay: float,
        clock: Callable[[], float],
        jitter: Callable[[], float],
    ) -> None:
        self.url = str(base_url.copy_with(username=None, password=None, query=None))
        self.limit = limit
        self.max_delay = max_delay
        self.since: float | None = None
        self.failures = 0
        self._clock = clock
        self._jitter = jitter
        self._warned_at = float("-inf")

    def delivered(self) -> None:
        """The stream brought an event: the server works, the outage is over."""
        self.since = None
        self.failures = 0

    def failed(self, error: Exception | None) -> float | None:
        """A try failed (``error`` is ``None`` for a stream that ended before its first
        event): the seconds to wait before the next, or ``None`` to give up."""
        if error is not None and not reconnectable(error):
            return None
        now = self._clock()
        if self.since is None:
            self.since = now
        self.failures += 1
        down = now - self.since
        give_up = self.limit is not None and down >= self.limit
        if down >= self.WARN_AFTER and now - self._warned_at >= self.WARN_EVERY:
            self._warned_at = now
            logger.warning(
                "%s %s for %.0f s (%s); %s",
                "Cannot reach the server at"
                if isinstance(error, APIConnectionError)
                else "No event stream from the server at",
                self.url,
                down,
                error or "each stream ended before its first event",
                "giving up" if give_up else "still trying",
            )
        if give_up:
            return None
        cap = min(self.max_delay, self.FIRST_DELAY * 2.0 ** min(self.failures, 30))
        return cap / 2 + self._jitter() * cap / 2

    def error(self, error: Exception | None) -> Exception:
        """What the serve raises once it gives up: the error itself when retrying could
        not help (the Session is gone, the key refused), otherwise one that names the
        URL and how long the server failed."""
        if error is not None and not reconnectable(error):
            return error
        down = 0.0 if self.since is None else self._clock() - self.since
        if isinstance(error, APIConnectionError):
            named: Exception = APIConnectionError(
                request=error.request,
                message=(
                    f"Cannot reach the server at {self.url} (tried for {down:.0f} s: "
                    f"{error}); check base_url or OPENAGENTCORE_BASE_URL and that the "
                    "server is running"
                ),
            )
        else:
            named = RunnerError(
                f"The server at {self.url} gave no event stream for {down:.0f} s ("
                f"{error or 'each stream ended before its first event'}); check that "
                "base_url points at the Agents API and that the server is healthy"
            )
        named.__cause__ = error
        return named


def ask_in_doubt(hook: InDoubtHandler, effect: AskInDoubt) -> InDoubtAnswer:
    """Run the application's ``on_in_doubt`` hook. A hook that raises (anything) or
    returns something else is logged, and the call gets the default policy (a failed
    result). A result it gives is encoded here, on the hook's thread: encoding runs the
    application's code too (a model's serializers), which the core never runs."""
    try:
        decision = hook(
            InDoubtCall(effect.key, effect.function_name, effect.arguments, effect.attempts)
        )
        value = decision.value
        if decision.kind == "result" and value is not None:
            value = encode_output(value)
        return InDoubtAnswer(effect.key, Verdict(decision.kind), value, decision.error)
    except BaseException:
        logger.exception(
            "on_in_doubt raised, or gave a result that cannot be sent, for call %s; "
            "failing it as outcome unknown",
            effect.key.call_id,
        )
        return InDoubtAnswer(effect.key, Verdict.FAIL)
