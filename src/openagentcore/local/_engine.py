"""The Session and Turn state machine.

All methods are synchronous and run on the server's single event loop, so there are no
thread races: HTTP handlers call into the engine, and the engine schedules its own
follow-up work (model steps, result application, cancellation) with ``call_soon`` so
that it happens after the input that caused it was admitted, as on the real server.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._faults import Faults
from ._model import Answer, CallFunctions, Fail, FunctionOutcome, ScriptedModel, TurnContext
from ._store import CallRecord, ItemRecord, SessionRecord, Store, TurnRecord, new_id, now

__all__ = ["ApiError", "Engine", "Published", "SessionLog", "Subscriber", "not_found", "sse_frame"]

MAX_BATCH_EVENTS = 64
#: Output deltas published per loop turn: a model's text arrives over time, and a
#: whole answer in one turn could outrun the stream buffer of a reader that keeps up.
_DELTAS_PER_STEP = 16
MAX_STORED_INPUT_BYTES = 512 * 1024
MAX_IDEMPOTENCY_KEY_BYTES = 128

# Messages from the contract's input error table (sessions-events.md).
MSG_NOT_FOUND = "Resource not found."
MSG_CANNOT_ACCEPT = "The Turn cannot accept this input in its current state."
MSG_DIFFERENT_RESULT = "The tool call already has a different result."
MSG_IDEMPOTENCY_CONFLICT = "This idempotency key was used with different input."
# The openai 3.51 stream helper looks for "Unknown pending tool call: <call_id>" to
# retry the registration race; the contract forbids echoing caller input in errors, and
# the contract wins.
MSG_UNKNOWN_CALL = "Unknown pending tool call."
MSG_OTHER_TURN = "The tool call belongs to a different Turn."
MSG_TURN_FAILED = "The execution could not complete."
MSG_DELETE_BUSY = "session must be durably idle or failed without required actions before deletion"


class ApiError(Exception):
    """An error response: status plus the ``{"error": {...}}`` envelope fields."""

    def __init__(
        self,
        status: int,
        code: str | None,
        message: str,
        *,
        type: str | None = None,
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.type = type or _default_type(status)
        self.param = param
        self.headers = dict(headers or {})

    def envelope(self) -> dict[str, Any]:
        return {
            "error": {
                "type": self.type,
                "code": self.code,
                "message": self.message,
                "param": self.param,
            }
        }


def _default_type(status: int) -> str:
    if status == 404:
        return "not_found_error"
    if status == 409:
        return "conflict_error"
    if status >= 500:
        return "server_error"
    return "invalid_request_error"


def not_found() -> ApiError:
    return ApiError(404, "not_found_error", MSG_NOT_FOUND)


def invalid(message: str, *, param: str | None = None, code: str = "invalid_request") -> ApiError:
    return ApiError(400, code, message, param=param)


def sse_frame(event: dict[str, Any]) -> str:
    return f"event: {event['type']}\ndata: {json.dumps(event, separators=(',', ':'))}\n\n"


@dataclass(frozen=True)
class Published:
    """One event as published: the event and its SSE frame, serialized once."""

    event: dict[str, Any]
    frame: str


class SessionLog:
    """The recent events of one Session that its readers may still need.

    It keeps at most ``max_events`` events and ``max_bytes`` bytes of frames, plus the
    newest event when it alone is larger (sessions-events.md, Live event stream).
    Publishing never waits for a reader; a reader whose next event was dropped has
    fallen behind.
    """

    def __init__(self, max_events: int, max_bytes: int) -> None:
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.first = 0  # position of the oldest kept event
        self.end = 0  # position the next event gets
        self.size = 0
        self._kept: deque[Published] = deque()
        self.readers: set[Subscriber] = set()

    def append(self, published: Published) -> None:
        self._kept.append(published)
        self.end += 1
        self.size += len(published.frame)
        while len(self._kept) > self.max_events or (
            self.size > self.max_bytes and len(self._kept) > 1
        ):
            self.size -= len(self._kept.popleft().frame)
            self.first += 1
        for reader in self.readers:
            reader.wake()

    def get(self, position: int) -> Published | None:
        """The event at ``position``; ``None`` when it was already dropped."""
        if position < self.first:
            return None
        return self._kept[position - self.first]


class Subscriber:
    """One live stream reader: a position in its Session's log."""

    def __init__(self, log: SessionLog, session_id: str, *, until_idle: bool = False) -> None:
        self.session_id = session_id
        self.log = log
        self.position = log.end
        #: Creation streams end after the first idle or failed Session event.
        self.until_idle = until_idle
        self.overflowed = False
        self.closed = False
        self._first: deque[Published] = deque()
        self._ready = asyncio.Event()

    def push_first(self, event: dict[str, Any]) -> None:
        """Deliver ``event`` before everything in the log (a creation's first event)."""
        self._first.append(Published(event, sse_frame(event)))
        self.wake()

    def wake(self) -> None:
        self._ready.set()

    def close(self) -> None:
        self.closed = True
        self.wake()

    def has_queued(self) -> bool:
        """Whether :meth:`next` would return without waiting."""
        return bool(self._first) or self.position < self.log.end or self.closed

    async def next(self, timeout: float) -> Published | None:
        """The next event; ``None`` when the stream must end; ``TimeoutError`` when idle."""
        while not self.has_queued():
            self._ready.clear()
            await asyncio.wait_for(self._ready.wait(), timeout)
        if self._first:
            return self._first.popleft()
        if self.position < self.log.end:
            published = self.log.get(self.position)
            if published is None:
                self.overflowed = True
                return None
            self.position += 1
            return published
        return None


@dataclass
class _Plan:
    """One checked event of an input batch, ready to apply."""

    kind: str
    event: dict[str, Any]
    call: CallRecord | None = None


class Engine:
    """Owns every state transition and publishes the matching events."""

    def __init__(self, store: Store, model: ScriptedModel, faults: Faults) -> None:
        self.store = store
        self.model = model
        self.faults = faults
        self._logs: dict[str, SessionLog] = {}
        #: Streams silenced by the ``stall_stream_after`` fault and still open.
        self.stalled_streams = 0
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- lifecycle -----------------------------------------------------------------

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Bind to the server loop and resume work a previous run left unfinished."""
        self._loop = loop
        for session in self.store.sessions.values():
            if session.deleted:
                continue
            for turn_id in session.turn_ids:
                self._resume(self.store.turns[turn_id])

    def _resume(self, turn: TurnRecord) -> None:
        if turn.ended:
            return
        if turn.cancel_requested:
            self._later(lambda: self._finish_cancel(turn.id))
        elif turn.status == "queued":
            self._later(lambda: self._start_next_queued(turn.session_id))
        elif turn.status == "waiting":
            for call in self._step_calls(turn):
                if call.result is not None and not call.applied:
                    self._await_receipt(call.call_id)
        elif any(not call.registered for call in self._step_calls(turn)):
            self._later(lambda: self._register_calls(turn.id))
        else:
            self._later(lambda: self._advance(turn.id))

    def _later(self, callback: Callable[[], None], delay: float = 0.0) -> None:
        loop = self._loop or asyncio.get_running_loop()
        if delay > 0:
            loop.call_later(delay, callback)
        else:
            loop.call_soon(callback)

    # -- subscriptions ---------------------------------------------------------------

    def subscribe(self, session_id: str, *, until_idle: bool = False) -> Subscriber:
        log = self._logs.get(session_id)
        if log is None:
            log = SessionLog(self.faults.stream_buffer, self.faults.stream_buffer_bytes)
            self._logs[session_id] = log
        subscriber = Subscriber(log, session_id, until_idle=until_idle)
        log.readers.add(subscriber)
        return subscriber

    def stream_counts(self) -> dict[str, int]:
        """Open event streams per Session (Sessions without one are left out)."""
        return {
            session_id: len(log.readers) for session_id, log in self._logs.items() if log.readers
        }

    def close_streams(self) -> None:
        """End every open stream, e.g. before the server shuts down."""
        for log in self._logs.values():
            for subscriber in log.readers:
                subscriber.close()

    def unsubscribe(self, subscriber: Subscriber) -> None:
        log = self._logs.get(subscriber.session_id)
        if log is subscriber.log:
            log.readers.discard(subscriber)
            if not log.readers:
                # Events are kept only for readers: the stream is live only.
                del self._logs[subscriber.session_id]

    def _emit(self, session_id: str, payload: dict[str, Any]) -> dict[str, Any]:
        event = {"event_id": new_id("event"), **payload}
        log = self._logs.get(session_id)
        if log is not None:
            log.append(Published(event, sse_frame(event)))
        return event

    # -- reads -----------------------------------------------------------------------

    def session(self, session_id: str) -> SessionRecord:
        session = self.store.sessions.get(session_id)
        if session is None or session.deleted:
            raise not_found()
        return session

    def latest_turn(self, session: SessionRecord) -> TurnRecord | None:
        return self.store.turns[session.turn_ids[-1]] if session.turn_ids else None

    def session_wire(self, session: SessionRecord) -> dict[str, Any]:
        turn = self.latest_turn(session)
        status = "idle"
        required: list[dict[str, Any]] = []
        if turn is not None:
            if turn.status == "failed":
                status = "failed"
            elif turn.status == "waiting" and not turn.cancel_requested:
                status = "requires_action"
                required = [
                    {
                        "type": "function_call",
                        "call_id": call.call_id,
                        "turn_id": call.turn_id,
                        "name": call.name,
                        "arguments": call.arguments,
                    }
                    for call in self._step_calls(turn)
                    if call.registered and not call.applied
                ]
            elif not turn.ended:
                status = "in_progress"
        return {
            "id": session.id,
            "object": "agent.session",
            "agent": session.agent,
            "created_at": session.created_at,
            "last_active_at": session.last_active_at,
            "environment": session.environment,
            "error": MSG_TURN_FAILED if status == "failed" else None,
            "metadata": session.metadata,
            "required_actions": required,
            "status": status,
            "usage": self._session_usage(session),
            "vault_ids": session.vault_ids,
        }

    def _session_usage(self, session: SessionRecord) -> dict[str, Any] | None:
        turns = [self.store.turns[turn_id] for turn_id in session.turn_ids]
        if not turns or any(not turn.ended or turn.usage is None for turn in turns):
            return None
        keys = ("input_tokens", "output_tokens", "total_tokens")
        total = {key: sum(int(turn.usage[key]) for turn in turns if turn.usage) for key in keys}
        return {
            **total,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        }

    def _step_calls(self, turn: TurnRecord) -> list[CallRecord]:
        return [self.store.calls[call_id] for call_id in turn.step_call_ids]

    # -- session creation and deletion -------------------------------------------------

    def create_session(
        self,
        *,
        agent: dict[str, Any],
        environment: dict[str, Any],
        metadata: dict[str, str],
        vault_ids: list[str],
        messages: list[dict[str, Any]],
        stream: bool,
        harness: str | None = None,
    ) -> tuple[SessionRecord, Subscriber | None]:
        """Create a Session and its first Turn in one commit.

        With ``stream`` the returned subscriber already holds ``agent.session.created``
        and every event of the creation, so fast execution cannot skip them.
        """
        timestamp = now()
        session = self.store.add(
            SessionRecord(
                id=new_id("sess"),
                created_at=timestamp,
                last_active_at=timestamp,
                metadata=metadata,
                agent=agent,
                environment=environment,
                vault_ids=vault_ids,
                harness=harness,
            )
        )
        subscriber = self.subscribe(session.id, until_idle=True) if stream else None
        if messages:
            self._admit_messages(session, messages)
        self.store.commit()
        if subscriber is not None:
            created = {"event_id": new_id("event"), "type": "agent.session.created"}
            subscriber.push_first({**created, "session": self.session_wire(session)})
            if not messages:
                subscriber.close()
        return session, subscriber

    def delete_session(self, session_id: str) -> None:
        session = self.store.sessions.get(session_id)
        if session is None:
            raise not_found()
        if session.deleted:
            return
        turn = self.latest_turn(session)
        if turn is not None and not turn.ended:
            raise ApiError(409, "conflict_error", MSG_DELETE_BUSY)
        session.deleted = True
        self.store.save(session)
        self.store.commit()
        log = self._logs.get(session_id)
        for subscriber in log.readers if log is not None else ():
            subscriber.close()

    # -- input -------------------------------------------------------------------------

    def submit_input(
        self, session_id: str, events: list[dict[str, Any]], idempotency_key: str | None
    ) -> None:
        """Admit a validated batch atomically, or raise without changing anything."""
        session = self.session(session_id)
        if not events:
            return
        fingerprint = json.dumps(events, sort_keys=True, separators=(",", ":"))
        if idempotency_key is not None and idempotency_key in session.input_keys:
            if session.input_keys[idempotency_key] == fingerprint:
                return
            raise ApiError(409, "idempotency_conflict", MSG_IDEMPOTENCY_CONFLICT)
        plans = self._check_batch(session, events)
        for plan in plans:
            if plan.kind == "message":
                self._admit_messages(session, list(plan.event["input"]))
            elif plan.kind == "cancel":
                self._request_cancel(session)
            elif plan.call is not None and plan.call.result is None:
                plan.call.result = plan.event
                self.store.save(plan.call)
                self._await_receipt(plan.call.call_id)
        if idempotency_key is not None:
            session.input_keys[idempotency_key] = fingerprint
        session.last_active_at = now()
        self.store.save(session)
        self.store.commit()

    def _check_batch(self, session: SessionRecord, events: list[dict[str, Any]]) -> list[_Plan]:
        """Run the per-event checks in batch order against the state the batch would leave."""
        active = self._active_turn(session)
        # "new" stands for a Turn an earlier message of this batch would start.
        active_id: str | None = active.id if active is not None else None
        cancelling = {active.id} if active is not None and active.cancel_requested else set()
        staged: dict[str, dict[str, Any]] = {}
        plans: list[_Plan] = []
        for event in events:
            kind = event["type"]
            if kind == "agent.session.input.message":
                if active_id is None or active_id in cancelling:
                    active_id = "new"
                plans.append(_Plan("message", event))
            elif kind == "agent.session.input.cancel":
                if active_id is not None:
                    cancelling.add(active_id)
                plans.append(_Plan("cancel", event))
            else:
                call = self._check_result(session, event, staged, cancelling)
                staged[call.call_id] = event
                plans.append(_Plan("result", event, call))
        return plans

    def _check_result(
        self,
        session: SessionRecord,
        event: dict[str, Any],
        staged: Mapping[str, dict[str, Any]],
        cancelling: set[str],
    ) -> CallRecord:
        call = self.store.calls.get(event["call_id"])
        if call is None or call.session_id != session.id or not call.registered:
            raise invalid(MSG_UNKNOWN_CALL, code="invalid_request_error")
        if call.turn_id != event["turn_id"]:
            raise invalid(MSG_OTHER_TURN, code="invalid_request_error")
        previous = staged.get(call.call_id, call.result)
        if previous is not None:
            if previous == event:
                return call
            raise ApiError(409, "conflict_error", MSG_DIFFERENT_RESULT)
        turn = self.store.turns[call.turn_id]
        if turn.ended or turn.cancel_requested or turn.id in cancelling:
            raise ApiError(409, "conflict_error", MSG_CANNOT_ACCEPT)
        return call

    def _active_turn(self, session: SessionRecord) -> TurnRecord | None:
        """The newest Turn that has not ended (a queued one may follow a cancelling one)."""
        for turn_id in reversed(session.turn_ids):
            turn = self.store.turns[turn_id]
            if not turn.ended:
                return turn
        return None

    def _admit_messages(self, session: SessionRecord, messages: Sequence[dict[str, Any]]) -> None:
        active = self._active_turn(session)
        if active is not None and not active.cancel_requested:
            # Steering: messages join the running Turn as their own user Items.
            for message in messages:
                self._add_user_item(active, message)
            return
        running = active is not None
        turn = self.store.add(
            TurnRecord(
                id=new_id("turn"),
                session_id=session.id,
                agent_id=str(session.agent["id"]),
                index=len(session.turn_ids),
                created_at=now(),
            )
        )
        session.turn_ids.append(turn.id)
        self.store.save(session)
        self._emit_turn(turn, "agent.session.turn.created")
        self._add_user_item(turn, messages[0])
        if not running:
            self._start(turn, session)
        for message in messages[1:]:
            self._add_user_item(turn, message)

    def _add_user_item(self, turn: TurnRecord, message: Mapping[str, Any]) -> None:
        content = list(message["content"])
        turn.input_characters += sum(len(str(part.get("text", ""))) for part in content)
        body = {
            "id": new_id("msg"),
            "type": "message",
            "role": "user",
            "content": content,
            "status": "completed",
            "phase": None,
            "turn_id": turn.id,
        }
        self._add_item(turn, body, output_index=None)
        self._emit_item(turn, "agent.session.turn.item.added", body, None)

    def _start(self, turn: TurnRecord, session: SessionRecord) -> None:
        turn.status = "in_progress"
        turn.started_at = now()
        self.store.save(turn)
        self._touch(session)
        self._emit_session(session, "agent.session.in_progress")
        self._emit_turn(turn, "agent.session.turn.in_progress")
        self._later(lambda: self._advance(turn.id))

    def _start_next_queued(self, session_id: str) -> None:
        session = self.store.sessions[session_id]
        if session.deleted:
            return
        for turn_id in session.turn_ids:
            turn = self.store.turns[turn_id]
            if turn.status == "queued" and not turn.cancel_requested:
                self._start(turn, session)
                self.store.commit()
                return
            if not turn.ended:
                return

    # -- execution ---------------------------------------------------------------------

    def _advance(self, turn_id: str) -> None:
        """Run the model's next step for a Turn that has everything it needs."""
        turn = self.store.turns[turn_id]
        session = self.store.sessions[turn.session_id]
        if turn.ended or turn.cancel_requested or turn.status != "in_progress" or session.deleted:
            return
        context = TurnContext(
            turn_index=turn.index,
            step=turn.step,
            tools=session.agent.get("tools") or [],
            text_format=(session.agent.get("text") or {}).get("format") or {"type": "text"},
            outcomes=self._outcomes(turn),
        )
        action = self.model.next_action(context)
        if isinstance(action, CallFunctions):
            self._issue_calls(turn, action)
        elif isinstance(action, Fail):
            # Never raw diagnostics: the public error is always this one.
            turn.error = {"code": "internal_error", "message": MSG_TURN_FAILED}
            self._settle(turn, session, "failed")
        else:
            self._answer(turn, session, action)
        self.store.commit()

    def _outcomes(self, turn: TurnRecord) -> list[FunctionOutcome]:
        outcomes = []
        for call_id in turn.call_ids:
            call = self.store.calls[call_id]
            if call.result is not None and call.applied:
                outcomes.append(
                    FunctionOutcome(
                        name=call.name,
                        call_id=call.call_id,
                        success=bool(call.result.get("success")),
                        output=call.result.get("output"),
                        error=call.result.get("error"),
                    )
                )
        return outcomes

    def _issue_calls(self, turn: TurnRecord, action: CallFunctions) -> None:
        if not action.calls:
            turn.step += 1
            self._later(lambda: self._advance(turn.id))
            return
        turn.step_call_ids = []
        for name, arguments in action.calls:
            output_index = turn.output_count
            turn.output_count += 1
            body: dict[str, Any] = {
                "id": new_id("fc"),
                "type": "function_call",
                "call_id": new_id("call"),
                "name": name,
                "arguments": dict(arguments),
                "status": "in_progress",
                "turn_id": turn.id,
            }
            item = self._add_item(turn, body, output_index=output_index)
            self._emit_item(turn, "agent.session.turn.item.added", body, output_index)
            item.body = {**body, "status": "completed"}
            self._emit_item(turn, "agent.session.turn.item.done", item.body, output_index)
            call = self.store.add(
                CallRecord(
                    call_id=body["call_id"],
                    session_id=turn.session_id,
                    turn_id=turn.id,
                    item_id=body["id"],
                    name=name,
                    arguments=dict(arguments),
                )
            )
            turn.step_call_ids.append(call.call_id)
            turn.call_ids.append(call.call_id)
        self._record_usage(turn, output_text="".join(json.dumps(a) for _, a in action.calls))
        if self.faults.pending_call_delay > 0:
            self._later(lambda: self._register_calls(turn.id), self.faults.pending_call_delay)
        else:
            self._register_calls(turn.id)

    def _register_calls(self, turn_id: str) -> None:
        """Let the Turn's issued calls accept results and ask the application for them."""
        turn = self.store.turns[turn_id]
        session = self.store.sessions[turn.session_id]
        if turn.ended or turn.cancel_requested or session.deleted:
            return
        for call in self._step_calls(turn):
            call.registered = True
            self.store.save(call)
        turn.status = "waiting"
        self.store.save(turn)
        self._touch(session)
        self._emit_session(session, "agent.session.requires_action")
        self.store.commit()

    def _await_receipt(self, call_id: str) -> None:
        """Apply an admitted result when the Harness confirms it: at once, or after the
        ``receipt_delay`` fault. A receipt later than the deadline never comes."""
        delay, deadline = self.faults.receipt_delay, self.faults.receipt_deadline
        if delay >= deadline:
            self._later(functools.partial(self._receipt_missing, call_id), deadline)
        else:
            self._later(functools.partial(self._apply_result, call_id), delay)

    def _receipt_missing(self, call_id: str) -> None:
        """No receipt before the deadline: the execution ends with the result's
        application uncertain; the stored result stays readable (message-content.md)."""
        call = self.store.calls[call_id]
        turn = self.store.turns[call.turn_id]
        session = self.store.sessions[turn.session_id]
        if call.applied or turn.ended or turn.cancel_requested or session.deleted:
            return
        turn.error = {"code": "internal_error", "message": MSG_TURN_FAILED}
        self._settle(turn, session, "failed")
        self.store.commit()

    def _apply_result(self, call_id: str) -> None:
        """The harness applies an admitted result: its Item appears and the action clears."""
        call = self.store.calls[call_id]
        turn = self.store.turns[call.turn_id]
        session = self.store.sessions[turn.session_id]
        if (
            call.applied
            or call.result is None
            or turn.ended
            or turn.cancel_requested
            or session.deleted
        ):
            return
        result = call.result
        body = {
            "id": new_id("fco"),
            "type": "function_call_output",
            "call_id": call.call_id,
            # Public Items always carry both fields; the stored result keeps presence.
            "output": result.get("output"),
            "error": result.get("error"),
            "status": "completed" if result.get("success") else "failed",
            "turn_id": turn.id,
        }
        call.applied = True
        self.store.save(call)
        self._add_item(turn, body, output_index=None)
        self._emit_item(turn, "agent.session.turn.item.added", body, None)
        if all(step_call.applied for step_call in self._step_calls(turn)):
            turn.step += 1
            turn.step_call_ids = []
            turn.status = "in_progress"
            self.store.save(turn)
            self._touch(session)
            self._emit_session(session, "agent.session.in_progress")
            self._emit_turn(turn, "agent.session.turn.in_progress")
            self._later(lambda: self._advance(turn.id))
        self.store.commit()

    def _answer(self, turn: TurnRecord, session: SessionRecord, answer: Answer) -> None:
        output_index = turn.output_count
        turn.output_count += 1
        item_id = new_id("msg")
        body: dict[str, Any] = {
            "id": item_id,
            "type": "message",
            "role": "assistant",
            "content": [],
            "status": "in_progress",
            "phase": "final_answer",
            "turn_id": turn.id,
        }
        self._add_item(turn, body, output_index=output_index)
        self._emit_item(turn, "agent.session.turn.item.added", body, output_index)
        part_fields = {"item_id": item_id, "output_index": output_index, "content_index": 0}
        self._emit_turn_event(
            turn, "agent.session.turn.content_part.added", {**part_fields, "part": _text_part("")}
        )
        deltas = [answer.text] if answer.structured else list(_chunks(answer.text))
        self._stream_answer(turn.id, item_id, answer, deltas, 0)

    def _stream_answer(
        self, turn_id: str, item_id: str, answer: Answer, deltas: Sequence[str], sent: int
    ) -> None:
        """Publish the answer's deltas a few per loop turn, as a model streams them, so
        a reader that keeps reading keeps up; then complete the message and the Turn."""
        turn = self.store.turns[turn_id]
        session = self.store.sessions[turn.session_id]
        if turn.ended or turn.cancel_requested or session.deleted:
            return  # cancellation settles the message with what was sent
        item = self.store.items[item_id]
        output_index = item.output_index
        part_fields = {"item_id": item_id, "output_index": output_index, "content_index": 0}
        batch = deltas[sent : sent + _DELTAS_PER_STEP]
        for delta in batch:
            self._emit_turn_event(
                turn, "agent.session.turn.output_text.delta", {**part_fields, "delta": delta}
            )
        sent += len(batch)
        if sent < len(deltas):
            item.body = {**item.body, "content": [_text_part("".join(deltas[:sent]))]}
            self.store.save(item)
            self.store.commit()
            self._later(
                functools.partial(self._stream_answer, turn_id, item_id, answer, deltas, sent)
            )
            return
        self._emit_turn_event(
            turn, "agent.session.turn.output_text.done", {**part_fields, "text": answer.text}
        )
        self._emit_turn_event(
            turn,
            "agent.session.turn.content_part.done",
            {**part_fields, "part": _text_part(answer.text)},
        )
        item.body = {**item.body, "content": [_text_part(answer.text)], "status": "completed"}
        self.store.save(item)
        self._emit_item(turn, "agent.session.turn.item.done", item.body, output_index)
        self._record_usage(turn, output_text=answer.text)
        self._end_turn(turn, session, "completed")
        self.store.commit()

    def _record_usage(self, turn: TurnRecord, *, output_text: str) -> None:
        """Deterministic stand-in usage: about four characters per token."""
        previous = turn.usage or {"input_tokens": 0, "output_tokens": 0}
        input_tokens = int(previous["input_tokens"]) + 8 + math.ceil(turn.input_characters / 4)
        output_tokens = int(previous["output_tokens"]) + math.ceil(len(output_text) / 4)
        turn.usage = {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens,
        }
        self.store.save(turn)

    # -- cancellation and settlement ----------------------------------------------------

    def _request_cancel(self, session: SessionRecord) -> None:
        turn = self._active_turn(session)
        if turn is None or turn.cancel_requested:
            return
        turn.cancel_requested = True
        self.store.save(turn)
        self._later(lambda: self._finish_cancel(turn.id))

    def _finish_cancel(self, turn_id: str) -> None:
        turn = self.store.turns[turn_id]
        session = self.store.sessions[turn.session_id]
        if turn.ended:
            return
        self._settle(turn, session, "cancelled")
        self.store.commit()

    def _settle(self, turn: TurnRecord, session: SessionRecord, status: str) -> None:
        """End a Turn early: its unfinished Items become incomplete, keeping their content."""
        for item in self.store.items.values():
            if item.turn_id == turn.id and item.body.get("status") == "in_progress":
                item.body = {**item.body, "status": "incomplete"}
                self.store.save(item)
        self._end_turn(turn, session, status)

    def _end_turn(self, turn: TurnRecord, session: SessionRecord, status: str) -> None:
        turn.status = status
        turn.completed_at = now()
        self.store.save(turn)
        self._touch(session)
        self._emit_turn(turn, f"agent.session.turn.{status}", usage=turn.usage)
        if self._active_turn(session) is not None:
            self._later(lambda: self._start_next_queued(session.id))
        elif status == "failed":
            self._emit_session(session, "agent.session.failed")
        else:
            self._emit_session(session, "agent.session.idle")

    # -- helpers -------------------------------------------------------------------------

    def _touch(self, session: SessionRecord) -> None:
        session.last_active_at = now()
        self.store.save(session)

    def _add_item(
        self, turn: TurnRecord, body: dict[str, Any], *, output_index: int | None
    ) -> ItemRecord:
        return self.store.add(
            ItemRecord(
                id=str(body["id"]),
                session_id=turn.session_id,
                turn_id=turn.id,
                seq=self.store.next_seq(),
                output_index=output_index,
                body=body,
            )
        )

    def _emit_session(self, session: SessionRecord, event_type: str) -> None:
        self._emit(session.id, {"type": event_type, "session": self.session_wire(session)})

    def _emit_turn(self, turn: TurnRecord, event_type: str, **extra: Any) -> None:
        payload = {
            "type": event_type,
            "session_id": turn.session_id,
            "turn_id": turn.id,
            "turn": turn.to_wire(),
        }
        self._emit(turn.session_id, {**payload, **extra})

    def _emit_item(
        self, turn: TurnRecord, event_type: str, body: dict[str, Any], output_index: int | None
    ) -> None:
        self._emit_turn_event(turn, event_type, {"item": body, "output_index": output_index})

    def _emit_turn_event(self, turn: TurnRecord, event_type: str, fields: dict[str, Any]) -> None:
        self._emit(
            turn.session_id,
            {"type": event_type, "session_id": turn.session_id, "turn_id": turn.id, **fields},
        )


def _text_part(text: str) -> dict[str, str]:
    return {"type": "output_text", "text": text}


def _chunks(text: str, size: int = 3) -> Iterable[str]:
    """Split text into deltas of a few words each, keeping every byte."""
    words = text.split(" ")
    groups = [" ".join(words[i : i + size]) for i in range(0, len(words), size)]
    return [group + (" " if index < len(groups) - 1 else "") for index, group in enumerate(groups)]
