"""Running one registered function for one call and turning its end into a result.

User code runs here, in the drivers' worker threads and tasks, never in the core: the
function itself, ``error_formatter`` and ``on_error``. Nothing a function does (raise,
return something unsendable, exit) escapes as anything but a :class:`FunctionOutcome`,
except a ``BaseException`` that ends the worker, which the drivers report as a call
without a result.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ._context import CallContext, run_with_context, run_with_context_async
from ._effects import FunctionOutcome, RunFunction
from ._registry import ArgumentsError
from ._results import (
    CANCELLED_ERROR,
    INTERNAL_ERROR,
    ErrorFormatter,
    checked_failure_event,
    failure_event,
    success_event,
)
from ._types import ErrorHook

__all__ = ["Hooks", "ReturnedAwaitable", "await_returned", "call_async", "call_sync"]

logger = logging.getLogger("openagentcore.runner")


@dataclass(frozen=True, slots=True)
class Hooks:
    error_formatter: ErrorFormatter | None
    on_error: ErrorHook | None


@dataclass(frozen=True, slots=True)
class ReturnedAwaitable:
    """What a plain function returned is awaitable: most likely the coroutine of an
    ``async def`` behind a wrapper unaware of coroutines. Reporting it as an unsendable
    result would fail every call without running the body, so the driver awaits it
    (:func:`await_returned`) where it awaits coroutine functions: on the async runner's
    event loop, and on a loop of the function's own thread on the sync runner."""

    awaitable: Awaitable[Any]


def call_sync(
    run: RunFunction, hooks: Hooks, context: CallContext
) -> FunctionOutcome | ReturnedAwaitable:
    """Bind the model's arguments and call a plain function, with ``current_call()``
    returning ``context``."""
    bound = _bind(run, hooks, context)
    if isinstance(bound, FunctionOutcome):
        return bound
    args, kwargs = bound
    try:
        value = run_with_context(context, run.function.func, *args, **kwargs)
    except asyncio.CancelledError:
        if not context.cancelled.is_set():
            raise
        return FunctionOutcome(run.key, failure_event(run.key, CANCELLED_ERROR))
    except Exception as exc:
        return _failed(run, exc, hooks)
    if inspect.isawaitable(value):
        return ReturnedAwaitable(value)
    return _succeeded(run, value, hooks)


async def call_async(run: RunFunction, hooks: Hooks, context: CallContext) -> FunctionOutcome:
    """Bind the model's arguments and await a coroutine function. Cancelled (its Turn
    was cancelled or its time ran out), it ends with a failed result."""
    bound = _bind(run, hooks, context)
    if isinstance(bound, FunctionOutcome):
        return bound
    args, kwargs = bound
    func: Callable[..., Awaitable[Any]] = run.function.func
    return await _settle(run, hooks, context, functools.partial(func, *args, **kwargs))


async def await_returned(
    run: RunFunction, hooks: Hooks, context: CallContext, returned: ReturnedAwaitable
) -> FunctionOutcome:
    """Await what a plain function returned, as :func:`call_async` awaits a coroutine
    function. A call cancelled while the function ran is not started on its awaitable."""
    if context.cancelled.is_set():
        if inspect.iscoroutine(returned.awaitable):
            returned.awaitable.close()  # never awaited, on purpose: no warning
        return FunctionOutcome(run.key, failure_event(run.key, CANCELLED_ERROR))
    return await _settle(run, hooks, context, functools.partial(_await, returned.awaitable))


async def _await(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


async def _settle(
    run: RunFunction, hooks: Hooks, context: CallContext, start: Callable[[], Awaitable[Any]]
) -> FunctionOutcome:
    """Await what ``start`` returns into an outcome, with ``current_call()`` returning
    ``context``."""
    try:
        value = await run_with_context_async(context, start)
    except asyncio.CancelledError:
        if not context.cancelled.is_set():
            raise  # not ours: the runner is closing
        return FunctionOutcome(run.key, failure_event(run.key, CANCELLED_ERROR))
    except Exception as exc:
        return _failed(run, exc, hooks)
    return _succeeded(run, value, hooks)


def _bind(
    run: RunFunction, hooks: Hooks, context: CallContext
) -> tuple[tuple[Any, ...], dict[str, Any]] | FunctionOutcome:
    """The function's arguments, or the failed outcome of arguments that do not fit."""
    try:
        return run.function.bind(run.arguments, context=context)
    except ArgumentsError as exc:
        return _bad_arguments(run, exc, hooks)
    except Exception as exc:
        # A validator raised something other than ValueError (a bug in it, or input it
        # did not expect): the function never ran, so the call is not in doubt. Its
        # message may quote the arguments, so neither the model nor the log gets it:
        # the log has its type and where it was raised.
        logger.error(
            "Validating the arguments of %s raised %s (its message is not logged: it may "
            "quote the arguments)\n%s",
            run.function.name,
            type(exc).__name__,
            "".join(traceback.format_tb(exc.__traceback__)).rstrip(),
        )
        error = ArgumentsError("Invalid arguments: they could not be validated.")
        return _bad_arguments(run, error, hooks)


def _succeeded(run: RunFunction, value: object, hooks: Hooks) -> FunctionOutcome:
    """A value that cannot be sent fails the call: the function did run, so leaving it
    without a result would put it in doubt."""
    try:
        return FunctionOutcome(run.key, success_event(run.key, value))
    except Exception as exc:  # TypeError, ValueError, or whatever the value's methods raise
        logger.error(
            "Function %s returned a %s, which cannot be sent as a result (%s); return str, "
            "JSON-compatible data, a pydantic model or content parts",
            run.function.name,
            type(value).__name__,
            exc,
        )
        return _failed(run, exc, hooks)


def _bad_arguments(run: RunFunction, exc: ArgumentsError, hooks: Hooks) -> FunctionOutcome:
    """The model's arguments do not fit the function: it never ran. The model gets the
    error (naming fields, never values) to correct itself; the operator a WARNING."""
    logger.warning(
        "The model called %s with arguments that do not fit (call_id=%s session=%s): %s",
        run.function.name,
        run.key.call_id,
        run.key.session_id,
        exc,
    )
    _tell_on_error(run, exc, hooks)
    return FunctionOutcome(run.key, failure_event(run.key, str(exc)), ran=False)


def _failed(run: RunFunction, exc: Exception, hooks: Hooks) -> FunctionOutcome:
    # The traceback goes to the logs only: the model sees the formatter's text.
    logger.warning(
        "Function %s raised %s (call_id=%s session=%s attempt=%d)",
        run.function.name,
        type(exc).__name__,
        run.key.call_id,
        run.key.session_id,
        run.attempt,
        exc_info=exc,
    )
    _tell_on_error(run, exc, hooks)
    if hooks.error_formatter is not None:
        try:
            return FunctionOutcome(
                run.key, checked_failure_event(run.key, hooks.error_formatter(exc))
            )
        except BaseException:  # even SystemExit: the function's failure is known
            logger.exception("error_formatter failed; sending the generic error text")
    return FunctionOutcome(run.key, failure_event(run.key, INTERNAL_ERROR))


def _tell_on_error(run: RunFunction, exc: Exception, hooks: Hooks) -> None:
    if hooks.on_error is not None:
        try:
            hooks.on_error(run.key, exc)
        except BaseException:  # even SystemExit: it must not turn a failure into doubt
            logger.exception("on_error hook raised; ignoring it")
