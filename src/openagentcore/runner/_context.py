"""What a running function may know about its call: :class:`CallContext`.

A function receives it by declaring a parameter annotated ``CallContext`` (any name);
code deeper in the call stack reads it with :func:`current_call`. The runner sets it
with :func:`run_with_context` (sync functions, in their worker thread) or
:func:`run_with_context_async` (coroutine functions, in their task).
"""

from __future__ import annotations

import contextvars
import hashlib
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import ParamSpec, TypeVar

__all__ = [
    "CallContext",
    "Cancellation",
    "call_idempotency_key",
    "cancel_call",
    "current_call",
    "new_call_context",
    "run_with_context",
    "run_with_context_async",
]

P = ParamSpec("P")
R = TypeVar("R")

#: Keys handed to downstream services start with this; the runner's own result
#: submissions use other keys, so the two never collide on one server.
_KEY_PREFIX = "oac-call-"


class Cancellation:
    """A read-only flag that says the runner wants the call to stop: its timeout passed,
    its Turn was cancelled, or the runner is stopping.

    Sync functions check ``ctx.cancelled.is_set()`` (or wait on it) between steps and
    return early, before any effect, when it is set. Coroutine functions are cancelled
    with ``asyncio.CancelledError`` instead.
    """

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = threading.Event()

    def is_set(self) -> bool:
        """Whether the call was cancelled (its Turn was, or its time ran out): a long
        function checks this between steps and stops early."""
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the call is cancelled or ``timeout`` seconds pass; ``True`` when
        cancelled. Use it instead of ``time.sleep`` to stop promptly."""
        return self._event.wait(timeout)

    def __repr__(self) -> str:
        return f"Cancellation(is_set={self.is_set()})"


@dataclass(frozen=True, slots=True)
class CallContext:
    """The identity and limits of one function call, given to the function that runs it.

    ``attempt`` is 1 on the first run and higher when an idempotent call is run again
    after an interruption. ``idempotency_key`` is the same for the call on every attempt,
    worker and restart, and at most 128 bytes: hand it to a downstream API that
    deduplicates by key (a payment provider, say) so a re-run cannot repeat the effect.
    ``deadline`` is a :func:`time.monotonic` instant (the clock ``asyncio`` uses, so
    ``asyncio.timeout_at(ctx.deadline)`` works), or ``None`` without a timeout.
    """

    session_id: str
    turn_id: str
    call_id: str
    function_name: str
    attempt: int
    idempotency_key: str
    deadline: float | None = None
    cancelled: Cancellation = field(default_factory=Cancellation, compare=False)

    def time_remaining(self) -> float | None:
        """Seconds until the deadline (0 once it passed), or ``None`` without one."""
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - time.monotonic())


def call_idempotency_key(session_id: str, turn_id: str, call_id: str) -> str:
    """The downstream idempotency key of a call: deterministic, 73 ASCII bytes for any
    IDs. Each ID is length-prefixed, so no two triples share a key."""
    digest = hashlib.sha256()
    for part in (session_id, turn_id, call_id):
        encoded = part.encode("utf-8", "surrogatepass")
        digest.update(b"%d:" % len(encoded) + encoded)
    return _KEY_PREFIX + digest.hexdigest()


def new_call_context(
    session_id: str,
    turn_id: str,
    call_id: str,
    function_name: str,
    *,
    attempt: int = 1,
    timeout: float | None = None,
) -> CallContext:
    """A context for a call about to run; ``timeout`` seconds from now set its deadline."""
    if attempt < 1:
        raise ValueError(f"attempt counts from 1, got {attempt}")
    return CallContext(
        session_id=session_id,
        turn_id=turn_id,
        call_id=call_id,
        function_name=function_name,
        attempt=attempt,
        idempotency_key=call_idempotency_key(session_id, turn_id, call_id),
        deadline=None if timeout is None else time.monotonic() + timeout,
    )


def cancel_call(context: CallContext) -> None:
    """Set the call's ``cancelled`` flag (for the runner; functions only read it)."""
    context.cancelled._event.set()


_current: contextvars.ContextVar[CallContext | None] = contextvars.ContextVar(
    "openagentcore_current_call", default=None
)


def current_call() -> CallContext:
    """The :class:`CallContext` of the function call running here.

    Works in the thread or task the runner runs the function in, in tasks it creates and
    in threads started with ``asyncio.to_thread`` or ``contextvars.copy_context().run``
    (a plain ``threading.Thread`` does not inherit context variables).
    """
    context = _current.get()
    if context is None:
        raise RuntimeError(
            "current_call() was used outside a function call run by a FunctionRunner or "
            "AsyncFunctionRunner. Call it from a registered function (or code it calls), "
            "or declare a parameter annotated CallContext instead."
        )
    return context


def run_with_context(
    context: CallContext, func: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs
) -> R:
    """Call ``func`` with :func:`current_call` returning ``context``, in a copy of the
    current context, so nothing leaks into the next call a worker thread runs."""

    def call() -> R:
        _current.set(context)
        return func(*args, **kwargs)

    return contextvars.copy_context().run(call)


async def run_with_context_async(
    context: CallContext, func: Callable[P, Awaitable[R]], /, *args: P.args, **kwargs: P.kwargs
) -> R:
    """Await ``func(*args, **kwargs)`` with :func:`current_call` returning ``context``;
    tasks it creates inherit it. The previous value is restored afterwards."""
    token = _current.set(context)
    try:
        return await func(*args, **kwargs)
    finally:
        _current.reset(token)
