"""Running one registered function for one call and turning its end into a result.

User code runs here, in the drivers' worker threads and tasks, never in the core: the
function itself, ``error_formatter`` and ``on_error``. Nothing a function does (raise,
return something unsendable, exit) escapes as anything but a :class:`FunctionOutcome`,
except a ``BaseException`` that ends the worker, which the drivers report as a call
without a result.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

from ._core import ErrorHook
from ._effects import FunctionOutcome, RunFunction
from ._registry import ArgumentsError
from ._results import INTERNAL_ERROR, ErrorFormatter, failure_event, success_event

__all__ = ["Hooks", "call_async", "call_sync"]

logger = logging.getLogger("openagentcore.runner")


@dataclass(frozen=True, slots=True)
class Hooks:
    error_formatter: ErrorFormatter | None
    on_error: ErrorHook | None


def call_sync(run: RunFunction, hooks: Hooks) -> FunctionOutcome:
    """Bind the model's arguments and call a plain function."""
    try:
        args, kwargs = run.function.bind(run.arguments)
    except ArgumentsError as exc:
        return FunctionOutcome(run.key, failure_event(run.key, str(exc)), ran=False)
    try:
        value = run.function.func(*args, **kwargs)
    except Exception as exc:
        return _failed(run, exc, hooks)
    return _succeeded(run, value, hooks)


async def call_async(run: RunFunction, hooks: Hooks) -> FunctionOutcome:
    """Bind the model's arguments and await a coroutine function."""
    try:
        args, kwargs = run.function.bind(run.arguments)
    except ArgumentsError as exc:
        return FunctionOutcome(run.key, failure_event(run.key, str(exc)), ran=False)
    try:
        awaitable: Awaitable[Any] = run.function.func(*args, **kwargs)
        value = await awaitable
    except Exception as exc:
        return _failed(run, exc, hooks)
    return _succeeded(run, value, hooks)


def _succeeded(run: RunFunction, value: object, hooks: Hooks) -> FunctionOutcome:
    """A value that cannot be sent fails the call: the function did run, so leaving it
    without a result would put it in doubt."""
    try:
        return FunctionOutcome(run.key, success_event(run.key, value))
    except (TypeError, ValueError) as exc:
        logger.error(
            "Function %s returned a %s, which cannot be sent as a result (%s); return str, "
            "JSON-compatible data, a pydantic model or content parts",
            run.function.name,
            type(value).__name__,
            exc,
        )
        return _failed(run, exc, hooks)


def _failed(run: RunFunction, exc: Exception, hooks: Hooks) -> FunctionOutcome:
    logger.debug("Function %s raised %s", run.function.name, type(exc).__name__)
    if hooks.on_error is not None:
        try:
            hooks.on_error(run.key, exc)
        except Exception:
            logger.exception("on_error hook raised; ignoring it")
    text = INTERNAL_ERROR
    if hooks.error_formatter is not None:
        try:
            text = hooks.error_formatter(exc)
        except Exception:
            logger.exception("error_formatter raised; sending the generic error text")
    return FunctionOutcome(run.key, failure_event(run.key, text))
