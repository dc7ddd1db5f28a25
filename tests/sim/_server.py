"""The simulated Agents API server: Sessions, their Turns, the result table, the stream.

What the contract says a runner can observe, and no more: input messages start a Turn
on an idle Session and join (steer) the running one; a Turn asks for function calls in
steps, then ends completed (with a final answer), failed or cancelled; results go
through the result table of execution-tools.md; the live stream starts when it opens,
keeps its order, and loses what is sent while it is down.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
from pydantic import BaseModel

from openagentcore import (
    APIConnectionError,
    APIError,
    APIResponseValidationError,
    APIStatusError,
    BadRequestError,
    ConflictError,
    InternalServerError,
    NotFoundError,
    UnprocessableEntityError,
)
from openagentcore._errors import status_error as client_status_error
from openagentcore.runner._effects import SessionOutcome
from openagentcore.runner._pump import Message, Received
from openagentcore.runner._serves import _UNANSWERED
from openagentcore.store import CallKey
from openagentcore.types import (
    EnvironmentConnectionAction,
    FunctionCallAction,
    FunctionCallItem,
    FunctionCallOutputItem,
    ItemAddedEvent,
    ItemDoneEvent,
    McpApprovalRequest,
    McpApprovalRequestAction,
    MessageItem,
    OutputText,
    RequiredAction,
    Session,
    SessionFailedEvent,
    SessionIdleEvent,
    SessionInProgressEvent,
    SessionRequiresActionEvent,
    Turn,
    TurnCancelledEvent,
    TurnCompletedEvent,
    TurnCreatedEvent,
    TurnFailedEvent,
)

from ._tasks import Violation

M = TypeVar("M", bound=BaseModel)


def _partial(model: type[M], **fields: Any) -> M:
    """``model`` built unvalidated from only the fields the runner reads: the real
    server's payloads carry more, and validating each would dominate a run."""
    return model.model_construct(**fields)


if TYPE_CHECKING:
    from openagentcore.runner import TurnResult

    from ._runner import SimRunner, SimStream
    from ._world import World

__all__ = ["REQUEST", "Server", "ServerCall", "ServerSession", "ServerTurn", "status_error"]

REQUEST = httpx.Request("POST", "http://sim.invalid/v1/agents/sessions/s/events")
ENDED = frozenset({"completed", "failed", "cancelled"})
_END_EVENTS = {
    "completed": TurnCompletedEvent,
    "failed": TurnFailedEvent,
    "cancelled": TurnCancelledEvent,
}
_STATUS_EVENTS = {
    "in_progress": SessionInProgressEvent,
    "requires_action": SessionRequiresActionEvent,
    "idle": SessionIdleEvent,
    "failed": SessionFailedEvent,
}


@dataclass
class ServerCall:
    key: CallKey
    name: str
    arguments: str
    #: Announced a moment before it accepts results (the early-announce fault).
    accept_at: float


@dataclass(eq=False)
class ServerTurn:
    id: str
    index: int
    #: The calls the model asks for, step by step, before it answers.
    steps: list[list[tuple[str, str]]]
    answer: str
    #: The model fails instead of answering.
    fails: bool
    step: int = -1
    status: str = "queued"
    pending: dict[str, ServerCall] = field(default_factory=dict)
    #: When the Turn was cancelled, if it was.
    cancelled_at: float | None = None
    #: Another action the current step requires beside its calls, if any: an approval
    #: or an Environment, answered by someone else with the step.
    action: RequiredAction | None = None

    @property
    def ended(self) -> bool:
        return self.status in ENDED


@dataclass(eq=False)
class ServerSession:
    id: str
    turns: list[ServerTurn] = field(default_factory=list)
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    announced: list[ServerCall] = field(default_factory=list)
    idempotency: dict[str, str] = field(default_factory=dict)
    items: list[Any] = field(default_factory=list)
    streams: list[SimStream] = field(default_factory=list)
    #: The status the stream last announced.
    announced_status: str = "idle"
    #: The snapshot reads return, until the Session changes.
    snapshot: Session | None = None
    #: When the Session was deleted, if it was: every request about it is a 404 since.
    deleted_at: float | None = None
    #: When the Session last changed (a Turn, a call, a result, a status).
    changed_at: float = 0.0

    @property
    def active(self) -> ServerTurn | None:
        """The Turn that has not ended (there is at most one: input steers it)."""
        if self.turns and not self.turns[-1].ended:
            return self.turns[-1]
        return None

    @property
    def status(self) -> str:
        turn = self.active
        if turn is not None:
            return "requires_action" if turn.pending else "in_progress"
        if self.turns and self.turns[-1].status == "failed":
            return "failed"
        return "idle"

    def turn(self, turn_id: str) -> ServerTurn | None:
        return next((turn for turn in self.turns if turn.id == turn_id), None)


class Server:
    """Every Session of one history, and the requests a runner can make of them."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.sessions: dict[str, ServerSession] = {}
        #: When each Session snapshot and stream event was made (by id, with the object
        #: kept so the id is not reused): the state of the server it shows.
        self._made_at: dict[int, tuple[object, float]] = {}
        #: For each runner and Session, the latest server state its pump has seen.
        self.known: dict[tuple[int, str], float] = {}
        #: Every call a Turn asked for.
        self.calls: dict[CallKey, ServerCall] = {}
        #: The runner whose request is being handled (None: the operator's).
        self.requester: SimRunner | None = None
        #: How the server refused a POST of each call's result: ``unknown`` (400, not
        #: pending), ``different`` (409, it holds another), ``cancelled`` (409, its Turn
        #: takes no result), ``reused`` (409, the batch's key came with another body) or
        #: ``invalid`` (422, it cannot take that output).
        self.refused: dict[CallKey, set[str]] = {}
        #: Results accepted from each worker's POSTs: per (generation, Session), how
        #: many; per generation, of which calls.
        self.accepted_from: dict[tuple[int, str], int] = {}
        self.accepted_keys: dict[int, set[CallKey]] = {}
        #: Requests each worker sent while the server failed every one, by second.
        self.failing_requests: dict[tuple[int, int], int] = {}
        #: Every action other than a function call a Session required (by id, with the
        #: action kept so the id is not reused), and the Session.
        self.other_actions: dict[int, tuple[RequiredAction, str]] = {}
        #: Per worker (generation), the other actions its ``on_action`` hook was told of,
        #: and those its pump took a snapshot of the Session showing; per worker and
        #: Session, those told since the worker began to serve it (again).
        self.actions_told: dict[int, set[int]] = {}
        self.actions_shown: dict[int, set[int]] = {}
        self.told_while_served: dict[tuple[int, str], set[int]] = {}

    # -- Turns ------------------------------------------------------------------------

    def call(self, key: CallKey) -> ServerCall | None:
        return self.calls.get(key)

    def add_session(self, session_id: str) -> ServerSession:
        session = self.sessions[session_id] = ServerSession(session_id)
        return session

    def draw_steps(self, session: ServerSession, *, few: bool) -> list[list[tuple[str, str]]]:
        """The calls a Turn asks for, step by step. ``few``: a Turn started by
        ``run_turn``, often answered at once (a fast model)."""
        rng, label = self.world.rng, f"{session.id}-{len(session.turns)}"
        count = rng.choice((0, 0, 1, 2)) if few else rng.randint(1, 3)
        return [
            [
                (rng.choice(("charge", "reserve")), json.dumps({"order": f"{label}-{i}-{j}"}))
                for j in range(rng.randint(1, 2))
            ]
            for i in range(count)
        ]

    def open_turn(
        self, session: ServerSession, steps: list[list[tuple[str, str]]], *, fails: bool = False
    ) -> ServerTurn:
        index = len(session.turns)
        turn_id = f"turn_{session.id}_{index}"
        turn = ServerTurn(turn_id, index, steps, f"the answer of {turn_id}", fails)
        session.turns.append(turn)
        created = _partial(
            TurnCreatedEvent,
            type="agent.session.turn.created",
            session_id=session.id,
            turn_id=turn_id,
            turn=None,
        )
        self._publish(session, created)
        self._changed(session)
        self.world.later(0.0, 0.05, lambda: self._start(session, turn))
        return turn

    def _start(self, session: ServerSession, turn: ServerTurn) -> None:
        if turn.status == "queued" and session.deleted_at is None:
            turn.status = "in_progress"
            self._next_step(session, turn)

    def _next_step(self, session: ServerSession, turn: ServerTurn) -> None:
        world = self.world
        if turn.ended or session.deleted_at is not None:
            return
        turn.step += 1
        if turn.step >= len(turn.steps):
            self._end(session, turn)
            return
        turn.status = "waiting"
        if world.rng.random() < 0.3:
            self._message(session, turn, f"working on {turn.id}", "commentary")
        for j, (name, arguments) in enumerate(turn.steps[turn.step]):
            key = CallKey(session.id, turn.id, f"call_{turn.index}_{turn.step}_{j}")
            early = world.chance(world.faults.early_announce)
            call = ServerCall(key, name, arguments, world.now + (0.05 if early else 0.0))
            if world.chance(world.faults.unstorable_id):
                world.unstorable.add(key)
            turn.pending[key.call_id] = call
            session.announced.append(call)
            self.calls[key] = call
            item = _partial(
                FunctionCallItem,
                type="function_call",
                id=f"fc_{key.call_id}",
                turn_id=turn.id,
                call_id=key.call_id,
                name=name,
                arguments=arguments,
                status="completed",
            )
            self._add_item(session, item, done=True)
        turn.action = self._other_action(session, turn)
        self._changed(session)
        if world.chance(world.faults.cancel_turn):
            world.later(0.0, 0.5, lambda: self._cancel(session, turn))

    def _other_action(self, session: ServerSession, turn: ServerTurn) -> RequiredAction | None:
        """In some histories a step also asks for what no function answers (an MCP tool
        call to approve, an Environment to connect): a runner only tells its ``on_action``
        hook. Someone else answers it with the step (it is required while the step's
        calls are pending). Drawn apart, so that other histories replay as before."""
        draw = self.world.other_actions
        if draw is None or draw.random() < 0.5:
            return None
        label = f"{session.id}_{turn.index}_{turn.step}"
        action: RequiredAction
        if draw.random() < 0.5:
            request = _partial(
                McpApprovalRequest,
                type="mcp_tool_call",
                server_label="sim",
                name="lookup",
                arguments={},
                message=f"may the agent look up {label}?",
            )
            action = _partial(
                McpApprovalRequestAction,
                type="mcp_approval_request",
                turn_id=turn.id,
                request_id=f"mcpr_{label}",
                request=request,
            )
        else:
            action = _partial(
                EnvironmentConnectionAction,
                type="environment_connection",
                environment_id=f"env_{label}",
            )
        self.other_actions[id(action)] = (action, session.id)
        return action

    def reporting_action(self, runner: SimRunner, session_id: str, action: object) -> str | None:
        """``runner`` hands ``action`` to its ``on_action`` hook (it runs later, on a
        thread): what is wrong with that, if anything. It must be an action the Session
        required, handed over once while the runner serves the Session (a runner that
        stops serving a Session forgets it, and tells again when it serves it again)."""
        problem = self._never_required(session_id, action)
        if problem is not None:
            return problem
        told = self.told_while_served.setdefault((runner.worker.generation, session_id), set())
        if id(action) in told:
            return f"on_action was told twice of {action!r} of Session {session_id}"
        told.add(id(action))
        return None

    def told_of_action(self, runner: SimRunner, session_id: str, action: object) -> str | None:
        """``runner``'s ``on_action`` hook runs for ``action``: what is wrong with that."""
        problem = self._never_required(session_id, action)
        if problem is None:
            self.actions_told.setdefault(runner.worker.generation, set()).add(id(action))
        return problem

    def _never_required(self, session_id: str, action: object) -> str | None:
        known = self.other_actions.get(id(action))
        if known is None or known[0] is not action or known[1] != session_id:
            return (
                f"on_action was told of {action!r} for Session {session_id}, which never "
                "required it"
            )
        return None

    def _end(self, session: ServerSession, turn: ServerTurn) -> None:
        if turn.fails:
            turn.status = "failed"
        else:
            self._message(session, turn, turn.answer, "final_answer")
            turn.status = "completed"
        self._publish_end(session, turn)
        self._changed(session)

    def _cancel(self, session: ServerSession, turn: ServerTurn) -> None:
        if turn.status != "waiting" or not self.world.chaos or session.deleted_at is not None:
            return
        if self.world.chance(self.world.faults.cancel_unseen):
            for stream in list(session.streams):  # the cancel happens while they are down
                self.drop(stream)
        turn.pending.clear()
        turn.status = "cancelled"
        turn.cancelled_at = self.world.now
        self._publish_end(session, turn)
        self._changed(session)

    def _publish_end(self, session: ServerSession, turn: ServerTurn) -> None:
        event = _partial(
            _END_EVENTS[turn.status],
            type=f"agent.session.turn.{turn.status}",
            session_id=session.id,
            turn_id=turn.id,
            turn=None,
        )
        self._publish(session, event)

    def _changed(self, session: ServerSession) -> None:
        """The Session's status or required actions may have changed: a Session event
        with its snapshot, if its status did."""
        session.snapshot = None
        session.changed_at = self.world.now
        status = session.status
        if status != session.announced_status:
            session.announced_status = status
            event = _partial(
                _STATUS_EVENTS[status],
                type=f"agent.session.{status}",
                session=self.snapshot(session.id),
            )
            self._publish(session, event)

    def _message(self, session: ServerSession, turn: ServerTurn, text: str, phase: str) -> None:
        item = _partial(
            MessageItem,
            type="message",
            id=f"msg_{len(session.items)}",
            turn_id=turn.id,
            role="assistant",
            content=[_partial(OutputText, type="output_text", text=text)],
            status="completed",
            phase=phase,
        )
        self._add_item(session, item, done=True)

    def _add_item(self, session: ServerSession, item: Any, *, done: bool) -> None:
        """Into the Session's history, and onto its stream: agent output as
        ``item.done``, function results and user messages as ``item.added``."""
        session.items.append(item)
        kind = ItemDoneEvent if done else ItemAddedEvent
        self._publish(
            session,
            _partial(
                kind,
                type=f"agent.session.turn.item.{'done' if done else 'added'}",
                session_id=session.id,
                turn_id=item.turn_id,
                item=item,
            ),
        )

    def delete(self, session_id: str) -> None:
        """The Session is deleted (by its owner, say): its Turns stop where they are,
        its streams end, and every request about it is answered 404 from now on."""
        session = self.sessions[session_id]
        session.deleted_at = self.world.now
        for stream in list(session.streams):
            self.drop(stream)

    def _exists(self, session_id: str) -> ServerSession:
        session = self.sessions[session_id]
        if session.deleted_at is not None:
            raise status_error(NotFoundError, 404, "not_found_error", "Session not found.")
        return session

    # -- reads ------------------------------------------------------------------------

    def read(self, session_id: str) -> Session:
        """``GET .../sessions/{id}``."""
        self._exists(session_id)
        return self.snapshot(session_id)

    def snapshot(self, session_id: str) -> Session:
        session = self.sessions[session_id]
        if session.snapshot is None:
            session.snapshot = self._snapshot(session)
            self._made(session.snapshot)
        return session.snapshot

    def _snapshot(self, session: ServerSession) -> Session:
        turn = session.active
        actions: list[RequiredAction] = [
            _partial(
                FunctionCallAction,
                type="function_call",
                turn_id=call.key.turn_id,
                call_id=call.key.call_id,
                name=call.name,
                arguments=call.arguments,
            )
            for call in (turn.pending.values() if turn is not None else ())
        ]
        if turn is not None and turn.pending and turn.action is not None:
            actions.append(turn.action)
        # Every defaulted field given: pydantic's model_construct inspects the
        # signature of each default factory it calls, which would dominate the run.
        return _partial(
            Session,
            id=session.id,
            status=session.status,
            required_actions=actions,
            metadata={},
            vault_ids=[],
        )

    def turn_snapshot(self, session_id: str, turn_id: str) -> Turn:
        turn = self._exists(session_id).turn(turn_id)
        assert turn is not None, f"the runner asked for an unknown Turn {turn_id}"
        return _partial(
            Turn,
            object="agent.session.turn",
            id=turn.id,
            session_id=session_id,
            agent_id="agent_sim",
            status=turn.status,
            created_at=turn.index,
        )

    def items(self, session_id: str) -> list[Any]:
        return list(self._exists(session_id).items)

    # -- input ------------------------------------------------------------------------

    def accept(
        self,
        session_id: str,
        events: list[Any],
        idempotency_key: str | None,
        *,
        by_hand: bool = False,
    ) -> None:
        """``POST .../events``: the pending-input gate, then messages or results (a
        person's answer, ``by_hand``, is not a saved result)."""
        world = self.world
        session = self._exists(session_id)
        if world.chance(world.faults.post_5xx):
            raise status_error(InternalServerError, 503, "execution_unavailable", "Try again.")
        if world.chance(world.faults.post_redirect):
            # As the client raises a redirect (it never follows one): RedirectError.
            response = httpx.Response(
                307, request=REQUEST, headers={"location": "http://elsewhere.invalid/v1/"}
            )
            raise client_status_error(response, None)
        results = any(isinstance(event, dict) for event in events)
        if results and world.chance(world.faults.post_invalid):
            for event in events:
                key = CallKey(session_id, event["turn_id"], event["call_id"])
                self.refused.setdefault(key, set()).add("invalid")
            raise status_error(
                UnprocessableEntityError,
                422,
                "invalid_request_error",
                "The result's output cannot be accepted.",
            )
        if world.chance(world.faults.post_pending_409):
            raise status_error(
                ConflictError,
                409,
                "conflict_error",
                "Earlier input to this Session is still pending.",
            )
        messages = [
            message for event in events if not isinstance(event, dict) for message in event.input
        ]
        if messages:
            self._admit(session, messages)
        else:
            assert idempotency_key is not None, "the runner posts results with a key"
            self._post_results(session, events, idempotency_key, by_hand=by_hand)

    def _admit(self, session: ServerSession, messages: list[Any]) -> None:
        """Messages start a Turn on an idle Session; they join the running one. Each is a
        user Item of that Turn, streamed as ``item.added``."""
        turn = session.active
        if turn is None:
            steps = self.draw_steps(session, few=True)
            turn = self.open_turn(session, steps, fails=self.world.rng.random() < 0.1)
        for message in messages:
            item = _partial(
                MessageItem,
                type="message",
                id=f"msg_{len(session.items)}",
                turn_id=turn.id,
                role="user",
                content=list(message.content),
                status="completed",
                phase=None,
            )
            self._add_item(session, item, done=False)

    def _post_results(
        self,
        session: ServerSession,
        events: list[dict[str, Any]],
        idempotency_key: str,
        *,
        by_hand: bool = False,
    ) -> None:
        """The result table of execution-tools.md, atomically per batch."""
        world = self.world
        body = json.dumps(events, sort_keys=True)
        keys = [CallKey(session.id, event["turn_id"], event["call_id"]) for event in events]
        runner = self.requester
        if runner is not None and len(events) == 1 and keys[0] not in world.unstorable:
            stored = world.store.get(keys[0])
            if stored is not None and idempotency_key != stored.idempotency_key:
                raise Violation(
                    f"seed {world.seed}: the result of {keys[0].call_id} was posted with a "
                    "key other than the one stored with it"
                )
        if runner is not None:
            owner = runner._core.owner
            for key, event in zip(keys, events, strict=True):
                first = world.posted_by.setdefault((owner, key), event)
                if first != event:
                    raise Violation(
                        f"seed {world.seed}: {owner} posted two different results for "
                        f"{key.call_id}: {first} and then {event}"
                    )
        if idempotency_key in session.idempotency:
            if session.idempotency[idempotency_key] != body:
                for key in keys:
                    self.refused.setdefault(key, set()).add("reused")
                raise status_error(ConflictError, 409, "idempotency_conflict", "Key reused.")
            self._accepted(runner, session, keys)
            return
        for event in events:
            call_id = event["call_id"]
            key = CallKey(session.id, event["turn_id"], call_id)
            if key in world.unstorable:
                # Nothing can be saved for it: a failure is posted unsaved.
                if event["success"]:
                    raise Violation(f"seed {world.seed}: unrecordable {call_id} got a success")
            elif not by_hand:
                saved = world.store.get(key)
                if saved is None or saved.result != event:
                    self._posted_ahead(runner, key, event)
            if call_id in session.results:
                if session.results[call_id] != event:
                    self.refused.setdefault(key, set()).add("different")
                    raise status_error(
                        ConflictError,
                        409,
                        "conflict_error",
                        "The tool call already has a different result.",
                    )
                continue
            turn = session.turn(event["turn_id"])
            pending = turn.pending.get(call_id) if turn is not None else None
            if pending is None and turn is not None and turn.status == "cancelled":
                self.refused.setdefault(key, set()).add("cancelled")
                raise status_error(
                    ConflictError,
                    409,
                    "conflict_error",
                    "The Turn cannot accept this input in its current state.",
                )
            if pending is None or pending.accept_at > world.now:
                self.refused.setdefault(key, set()).add("unknown")
                raise status_error(
                    BadRequestError, 400, "invalid_request_error", "Unknown pending tool call."
                )
        session.idempotency[idempotency_key] = body
        answered: list[ServerTurn] = []
        for event in events:
            call_id = event["call_id"]
            if call_id in session.results:
                continue
            session.results[call_id] = event
            turn = session.turn(event["turn_id"])
            assert turn is not None
            turn.pending.pop(call_id)
            answered.append(turn)
            item = _partial(
                FunctionCallOutputItem,
                type="function_call_output",
                id=f"fco_{call_id}",
                turn_id=turn.id,
                call_id=call_id,
            )
            self._add_item(session, item, done=False)
        for turn in dict.fromkeys(answered):
            if not turn.pending and turn.status == "waiting":
                turn.status = "in_progress"
                world.later(0.0, 0.05, functools.partial(self._next_step, session, turn))
        self._changed(session)
        self._accepted(runner, session, keys)

    def _posted_ahead(self, runner: SimRunner | None, key: CallKey, event: dict[str, Any]) -> None:
        """A result the store does not hold as saved is posted only by a runner that was
        granted the call's claim (or a take-over), for an idempotent function (its result
        goes out as it is saved): never the outcome of a run whose claim was lost."""
        world = self.world
        call = self.call(key)
        owner = None if runner is None else runner._core.owner
        granted = any(grant[:2] == (owner, key) for grant in world.granted)
        if call is None or call.name != "reserve" or not granted:
            raise Violation(
                f"seed {world.seed}: posted a result for {key.call_id} not saved as sent, "
                "by a runner never granted its claim"
            )
        world.posted_ahead.setdefault(key, []).append(event)

    def _accepted(
        self, runner: SimRunner | None, session: ServerSession, keys: list[CallKey]
    ) -> None:
        """A POST of results from ``runner`` succeeded (its answer may yet be lost)."""
        if runner is None:
            return
        generation = runner.worker.generation
        where = (generation, session.id)
        self.accepted_from[where] = self.accepted_from.get(where, 0) + len(keys)
        self.accepted_keys.setdefault(generation, set()).update(keys)

    # -- the live stream ----------------------------------------------------------------

    def subscribe(self, stream: SimStream) -> SimStream:
        """Open a stream; it carries what happens from the moment it is open. While the
        server fails (an outage of kind ``html``), it opens and ends at once, as a web
        page served with status 200 instead of the stream does."""
        if self.world.failing() == "html":
            stream.end(_not_a_stream())
            return stream
        self._exists(stream.session_id).streams.append(stream)
        return stream

    def unsubscribe(self, stream: SimStream) -> None:
        streams = self.sessions[stream.session_id].streams
        if stream in streams:
            streams.remove(stream)

    def _publish(self, session: ServerSession, event: Any) -> None:
        world = self.world
        self._made(event)
        for stream in list(session.streams):
            copies = 2 if world.chance(world.faults.stream_dup) else 1
            for _ in range(copies):
                self._send(stream, functools.partial(stream.push, event))
            if world.chance(world.faults.stream_drop):
                self.drop(stream)

    def drop(self, stream: SimStream) -> None:
        """The connection breaks: what the server sends from now on is lost."""
        self.unsubscribe(stream)
        self._send(stream, functools.partial(stream.end, APIConnectionError(request=REQUEST)))

    def drop_every_stream(self) -> None:
        for session in self.sessions.values():
            for stream in list(session.streams):
                self.drop(stream)

    def _send(self, stream: SimStream, arrive: Any) -> None:
        world = self.world
        arrival = max(world.now + world.rng.uniform(0.001, 0.02), stream.last_arrival)
        stream.last_arrival = arrival
        world.at(arrival, arrive)

    # -- what the runners know ----------------------------------------------------------

    def _made(self, thing: object) -> None:
        self._made_at[id(thing)] = (thing, self.world.now)

    def requested(self, runner: SimRunner) -> None:
        """A request reached the server: while it fails every one, the request fails
        too (and is counted, to bound how hard a runner presses a failing server)."""
        kind = self.world.failing()
        if kind is None:
            return
        second = (runner.worker.generation, int(self.world.now))
        self.failing_requests[second] = self.failing_requests.get(second, 0) + 1
        if kind == "refused":
            raise APIConnectionError(request=REQUEST)
        if kind == "html":
            raise _not_json()
        raise status_error(InternalServerError, 502, None, "Bad gateway")

    def seen_by(self, runner: SimRunner, messages: list[Message]) -> None:
        """``runner``'s pump took ``messages``: the newest server state each shows of
        its Session is now known to it (a Turn's cancel, say)."""
        for message in messages:
            shown: object
            session_id: str | None
            if isinstance(message, SessionOutcome) and message.session is not None:
                shown, session_id = message.session, message.session_id
                if _read_after_a_call(runner, session_id):
                    # The read was sent before the runner knew of some call of the
                    # Session: its snapshot may predate that call's Turn, so it cannot
                    # tell the runner that Turn ended (docs/runner.md).
                    continue
            elif isinstance(message, Received):
                shown, session_id = message.event, _session_of(message.event)
            else:
                continue
            snapshot = shown if isinstance(shown, Session) else getattr(shown, "session", None)
            if isinstance(snapshot, Session):
                shows = self.actions_shown.setdefault(runner.worker.generation, set())
                shows.update(
                    id(action)
                    for action in snapshot.required_actions
                    if id(action) in self.other_actions
                )
            made = self._made_at.get(id(shown))
            if made is None or made[0] is not shown or session_id is None:
                continue
            key = (runner.worker.generation, session_id)
            self.known[key] = max(self.known.get(key, float("-inf")), made[1])

    def knows_since(self, runner: SimRunner, session_id: str) -> float:
        """The newest server state of the Session ``runner`` has seen."""
        return self.known.get((runner.worker.generation, session_id), float("-inf"))

    def blocked(self, session_id: str, rejected: list[CallKey]) -> bool:
        """Whether the running Turn waits on a call whose result the server refused:
        no runner may post another, so the Turn cannot end without a person."""
        turn = self.sessions[session_id].active
        return turn is not None and any(key.call_id in turn.pending for key in rejected)

    # -- what run_turn returned ----------------------------------------------------------

    def check_turn_result(self, result: TurnResult[Any]) -> bool:
        """``run_turn`` returned: its Turn ended, with that status and that answer; or
        it waits on a result the server refused (then True: a person must look)."""
        seed = self.world.seed
        turn = self.sessions[result.session_id].turn(result.turn_id)
        if turn is None:
            raise Violation(f"seed {seed}: run_turn returned an unknown Turn {result.turn_id}")
        if result.status == "waiting":
            # Returned early: a snapshot after the refusal still showed the Turn waiting
            # on that call (someone may settle it since, so only the reason is checked).
            if not any(key.turn_id == turn.id for key in result.report.rejected):
                raise Violation(
                    f"seed {seed}: run_turn returned {turn.id} waiting, with no refused "
                    "result of that Turn to explain it"
                )
            return True
        if not turn.ended or result.status != turn.status:
            raise Violation(
                f"seed {seed}: run_turn returned status {result.status!r} for "
                f"{turn.id}, which is {turn.status!r}"
            )
        if turn.status == "completed" and result.text != turn.answer:
            raise Violation(
                f"seed {seed}: run_turn returned the text {result.text!r} for {turn.id}, "
                f"whose answer is {turn.answer!r}"
            )
        return False


def status_error(
    kind: type[APIStatusError], status: int, code: str | None, message: str
) -> APIStatusError:
    response = httpx.Response(status, request=REQUEST)
    body = {"error": {"type": code or "error", "code": code, "message": message, "param": None}}
    return kind(message, response=response, body=body)


def _read_after_a_call(runner: SimRunner, session_id: str) -> bool:
    """Whether ``runner`` learned of a call of the Session, one that still waits for
    its function or runs it, after it sent the read it is about to take in."""
    core = runner._core
    view = core._view(session_id)
    return any(
        call.known_at_read >= view.reads_sent and call.phase in _UNANSWERED
        for call in view.calls.values()
    )


def _session_of(event: Any) -> str | None:
    session_id = getattr(event, "session_id", None)
    if session_id is None and getattr(event, "session", None) is not None:
        session_id = event.session.id
    return session_id


def _not_a_stream() -> APIError:
    return APIResponseValidationError(
        "Expected an event stream, got text/html",
        response=httpx.Response(200, request=REQUEST),
        body=None,
    )


def _not_json() -> APIError:
    return APIResponseValidationError(
        "The response is not JSON (text/html)",
        response=httpx.Response(200, request=REQUEST),
        body=None,
    )
