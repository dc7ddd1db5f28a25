"""What operators see of calls: log lines, and OpenTelemetry spans and metrics.

Drivers hand the observer, once per round of their pump and in order, the messages fed
to the core, the notes it made (:class:`CallStarted`, :class:`CallSettled`, and the
core's own log lines as :class:`LogNote`) and the effects it returned. From those alone
it logs one INFO line when a call starts and one when it settles, logs what the core
said, warns when the result store stays unreachable, and, when OpenTelemetry
is installed, records a span per call (GenAI semantic conventions for
``execute_tool``) with child spans for saving and posting its result, and metrics.
"""

from __future__ import annotations

import contextlib
import logging
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..store import CallKey, StoreUnavailableError
from ._effects import (
    Answers,
    AskInDoubt,
    CallSettled,
    CallStarted,
    ClaimCall,
    MarkInDoubt,
    Note,
    Outcome,
    PostOutcome,
    PostResults,
    SaveResult,
    StoreAnswer,
    TakeOver,
)
from ._pump import Dropped

__all__ = ["CallObserver", "OTEL_AVAILABLE"]

logger = logging.getLogger("openagentcore.runner.calls")
runner_logger = logging.getLogger("openagentcore.runner")

try:  # imported once: without OpenTelemetry, observing calls costs nothing more
    from opentelemetry import metrics as otel_metrics
    from opentelemetry import trace as otel_trace

    OTEL_AVAILABLE = True
except ImportError:  # pragma: no cover - the dev environment has it
    OTEL_AVAILABLE = False

#: Warn that the store is unreachable once it has been for this long, then this often.
STORE_WARN_AFTER = 5.0
STORE_WARN_EVERY = 30.0
#: An observer that keeps failing logs its first failure, then one in this many.
_FAILURES_LOGGED_EVERY = 1000
#: Function names remembered for calls not settled yet.
_NAMES_LIMIT = 4096
#: Outcomes that count a call as in doubt even when no effect showed it.
_IN_DOUBT_OUTCOMES = frozenset({Outcome.IN_DOUBT_ELSEWHERE})
#: Outcomes after which the server holds this runner's result.
_OK_OUTCOMES = frozenset({Outcome.SUBMITTED, Outcome.APPLIED, Outcome.DUPLICATE})


@dataclass(slots=True)
class _Tracked:
    """One call this runner is observing, from its first sign until it settles."""

    function_name: str
    started_at: float | None = None
    attempt: int = 0
    span: Any = None
    children: list[Any] = field(default_factory=list)


class CallObserver:
    """Turns what the pump sees into log lines, spans and metrics.

    ``tracer_provider``/``meter_provider`` default to OpenTelemetry's global ones, so
    configuring OpenTelemetry in the application is enough.
    """

    def __init__(
        self,
        *,
        store_location: str = "",
        tracer_provider: Any = None,
        meter_provider: Any = None,
    ) -> None:
        self._calls: dict[CallKey, _Tracked] = {}
        #: POSTs in flight, by the identity of their batch: each call's post span.
        self._posts: dict[int, list[tuple[CallKey, Any]]] = {}
        self._saves: dict[CallKey, Any] = {}
        #: Calls counted in doubt (once each) until they settle.
        self._doubted: set[CallKey] = set()
        #: Function names of recently claimed calls, for calls in doubt found by a claim.
        self._names: OrderedDict[CallKey, str] = OrderedDict()
        self._store_location = store_location
        self._store_down_since: float | None = None
        self._store_warned_at = float("-inf")
        self._tracer: Any = None
        self._failures = 0
        if OTEL_AVAILABLE:
            try:
                self._setup_otel(tracer_provider, meter_provider)
            except Exception as exc:
                raise TypeError(
                    "tracer_provider and meter_provider must be OpenTelemetry providers "
                    f"(or None for the global ones): {exc!r}"
                ) from exc

    def _setup_otel(self, tracer_provider: Any, meter_provider: Any) -> None:
        from .. import __version__

        self._tracer = otel_trace.get_tracer(
            "openagentcore", __version__, tracer_provider=tracer_provider
        )
        meter = otel_metrics.get_meter("openagentcore", __version__, meter_provider=meter_provider)
        self._calls_counter = meter.create_counter(
            "openagentcore.calls", unit="{call}", description="Calls settled, by outcome"
        )
        self._duration = meter.create_histogram(
            "openagentcore.call.duration",
            unit="s",
            description="From a function's start to its call settling",
        )
        self._in_doubt_counter = meter.create_counter(
            "openagentcore.calls.in_doubt",
            unit="{call}",
            description="Calls found started without a saved result",
        )
        self._reconnects = meter.create_counter(
            "openagentcore.stream.reconnects",
            unit="{reconnect}",
            description="Times a Session's event stream dropped and was opened again",
        )
        self._store_errors = meter.create_counter(
            "openagentcore.store.errors",
            unit="{error}",
            description="Result store operations that failed",
        )

    # -- the pump's round ---------------------------------------------------------------

    def observe(
        self,
        notes: Sequence[Note],
        now: float,
        *,
        messages: Sequence[object] = (),
        effects: Sequence[object] = (),
    ) -> None:
        """One round of the pump: the answers fed to the core, then its notes, then the
        effects it returned (in that order, so child spans end before their call's).

        Observing never changes serving: whatever a tracer, a meter or a log handler
        raises is logged (the first time, then every ``_FAILURES_LOGGED_EVERY``th) and
        dropped, and the round's effects are carried out all the same."""
        try:
            self._observe(notes, now, messages, effects)
        except Exception:
            self._failures += 1
            if self._failures % _FAILURES_LOGGED_EVERY == 1:
                with contextlib.suppress(Exception):  # the failing handler may be ours
                    runner_logger.exception(
                        "Observing calls failed (%d times so far); serving goes on",
                        self._failures,
                    )

    def _observe(
        self,
        notes: Sequence[Note],
        now: float,
        messages: Sequence[object],
        effects: Sequence[object],
    ) -> None:
        for message in messages:
            self._on_message(message, now)
        for note in notes:
            if isinstance(note, CallStarted):
                self._on_started(note, now)
            elif isinstance(note, CallSettled):
                self._on_settled(note, now)
            else:
                runner_logger.log(note.level, note.message, *note.args)
        for effect in effects:
            self._on_effect(effect)

    def _on_message(self, message: object, now: float) -> None:
        if isinstance(message, StoreAnswer):
            self._on_store_answer(message, now)
        elif isinstance(message, PostOutcome):
            for key, span in self._posts.pop(id(message.batch), []):
                _end(span, message.error)
                tracked = self._calls.get(key)
                if tracked is not None and span in tracked.children:
                    tracked.children.remove(span)
        elif isinstance(message, Dropped) and self._tracer is not None:
            self._reconnects.add(1)

    def _on_store_answer(self, answer: StoreAnswer, now: float) -> None:
        effect = answer.effect
        if isinstance(answer.value, Answers):  # a batch of lookups: each as if alone
            for each in answer.value.answers:
                self._on_store_answer(each, now)
            return
        if answer.error is not None:
            if self._tracer is not None:
                self._store_errors.add(1, {"error.type": type(answer.error).__name__})
            if isinstance(answer.error, StoreUnavailableError):
                self._store_unreachable(answer.error, now)
        else:
            if self._store_down_since is not None:
                runner_logger.info("Result store %s is reachable again", self._store_location)
            self._store_down_since = None
        if isinstance(effect, SaveResult):
            span = self._saves.pop(effect.key, None)
            if span is not None:
                _end(span, answer.error)
                tracked = self._calls.get(effect.key)
                if tracked is not None and span in tracked.children:
                    tracked.children.remove(span)
        elif isinstance(effect, MarkInDoubt) and answer.value is True:
            self._mark_in_doubt(effect.key)

    def _store_unreachable(self, error: Exception, now: float) -> None:
        if self._store_down_since is None:
            self._store_down_since = now
        down = now - self._store_down_since
        if down >= STORE_WARN_AFTER and now - self._store_warned_at >= STORE_WARN_EVERY:
            self._store_warned_at = now
            runner_logger.warning(
                "Result store %s unreachable for %.0f s (%s); results wait in memory and "
                "are saved once it is back",
                self._store_location,
                down,
                error,
            )

    def _on_started(self, note: CallStarted, now: float) -> None:
        tracked = self._track(note.key, note.function_name)
        tracked.started_at = now
        tracked.attempt = note.attempt
        if tracked.span is not None:
            tracked.span.set_attribute("openagentcore.call.attempt", note.attempt)
        logger.info(
            "call started: %s call_id=%s session=%s attempt=%d",
            note.function_name,
            note.key.call_id,
            note.key.session_id,
            note.attempt,
        )

    def _on_settled(self, note: CallSettled, now: float) -> None:
        tracked = self._calls.pop(note.key, None)
        began = None if tracked is None else tracked.started_at
        duration = None if began is None else now - began
        logger.info(
            "call settled: %s call_id=%s session=%s outcome=%s%s",
            note.function_name,
            note.key.call_id,
            note.key.session_id,
            note.outcome.value,
            "" if duration is None else f" duration={duration:.3f}s",
        )
        if self._tracer is None:
            return
        if note.outcome in _IN_DOUBT_OUTCOMES:
            self._mark_in_doubt(note.key, note.function_name)
        self._doubted.discard(note.key)
        self._names.pop(note.key, None)
        attributes = {
            "gen_ai.tool.name": note.function_name,
            "openagentcore.call.outcome": note.outcome.value,
        }
        self._calls_counter.add(1, attributes)
        if duration is not None:
            self._duration.record(duration, attributes)
        if tracked is None or tracked.span is None:
            return
        for child in tracked.children:
            _end(child, None)
        span = tracked.span
        span.set_attribute("openagentcore.call.outcome", note.outcome.value)
        if note.outcome not in _OK_OUTCOMES:
            span.set_attribute("error.type", note.outcome.value)
            span.set_status(otel_trace.StatusCode.ERROR, f"call {note.outcome.value}")
        span.end()

    def _on_effect(self, effect: object) -> None:
        if isinstance(effect, ClaimCall):
            self._names[effect.key] = effect.function_name
            if len(self._names) > _NAMES_LIMIT:
                self._names.popitem(last=False)
        if isinstance(effect, (AskInDoubt, TakeOver)) or (
            isinstance(effect, SaveResult) and effect.owner is None
        ):
            # Deciding, re-running, or failing a call in doubt without running it.
            self._mark_in_doubt(effect.key, getattr(effect, "function_name", ""))
        if self._tracer is None:
            return
        if isinstance(effect, SaveResult):
            tracked = self._calls.get(effect.key)
            if tracked is not None and tracked.span is not None:
                span = self._child(tracked, "save_result", effect.key)
                if effect.event.get("success") is False:
                    tracked.span.set_attribute("error.type", "function_failed")
                self._saves[effect.key] = span
        elif isinstance(effect, PostResults):
            posts = self._posts.setdefault(id(effect.batch), [])
            for record in effect.batch.records:
                # A saved result resubmitted after a restart starts its call's span here.
                tracked = self._track(record.key, record.function_name)
                if tracked.span is not None:
                    posts.append((record.key, self._child(tracked, "post_result", record.key)))

    # -- helpers ------------------------------------------------------------------------

    def _track(self, key: CallKey, function_name: str) -> _Tracked:
        tracked = self._calls.get(key)
        if tracked is None:
            tracked = self._calls[key] = _Tracked(function_name)
            if self._tracer is not None:
                span = self._tracer.start_span(
                    f"execute_tool {function_name}",
                    kind=otel_trace.SpanKind.INTERNAL,
                    attributes={
                        "gen_ai.operation.name": "execute_tool",
                        "gen_ai.tool.name": function_name,
                        "gen_ai.tool.call.id": key.call_id,
                        "gen_ai.tool.type": "function",
                        "openagentcore.session_id": key.session_id,
                        "openagentcore.turn_id": key.turn_id,
                    },
                )
                # Without an OpenTelemetry SDK the span records nothing: skip the
                # child spans and attributes a call would otherwise cost.
                if span.is_recording():
                    tracked.span = span
                    if key in self._doubted:
                        span.set_attribute("openagentcore.call.in_doubt", True)
        return tracked

    def _child(self, tracked: _Tracked, name: str, key: CallKey) -> Any:
        context = otel_trace.set_span_in_context(tracked.span)
        span = self._tracer.start_span(
            f"openagentcore.{name}",
            context=context,
            attributes={"gen_ai.tool.call.id": key.call_id},
        )
        tracked.children.append(span)
        return span

    def _mark_in_doubt(self, key: CallKey, function_name: str = "") -> None:
        if key in self._doubted:
            return
        self._doubted.add(key)
        function_name = function_name or self._names.get(key, "")
        tracked = self._calls.get(key)
        if tracked is not None:
            function_name = tracked.function_name
            if tracked.span is not None:
                tracked.span.set_attribute("openagentcore.call.in_doubt", True)
        if self._tracer is not None:
            attributes = {"gen_ai.tool.name": function_name} if function_name else {}
            self._in_doubt_counter.add(1, attributes)


def _end(span: Any, error: BaseException | None) -> None:
    if error is not None:
        span.set_attribute("error.type", type(error).__name__)
        span.set_status(otel_trace.StatusCode.ERROR, str(error))
    span.end()
