"""The runner's public types: what the application's hooks receive and answer.

They live apart from the core's decisions (:mod:`._core` and the modules it is made
of), so that user code and the drivers import them without the call machine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from .._errors import OpenAgentCoreError
from ..store import CallKey
from ..types import FunctionCallAction, FunctionCallItem, RequiredAction
from ._results import IN_DOUBT_ERROR

__all__ = [
    "ActionHandler",
    "ErrorHook",
    "InDoubtCall",
    "InDoubtDecision",
    "InDoubtHandler",
    "PendingCall",
    "RunnerError",
]


class RunnerError(OpenAgentCoreError):
    """The runner cannot go on serving this Session (e.g. it was deleted)."""


@dataclass(frozen=True, slots=True)
class PendingCall:
    """A function call the server is waiting on."""

    key: CallKey
    name: str
    arguments: object

    @classmethod
    def from_action(cls, session_id: str, action: FunctionCallAction) -> PendingCall:
        return cls(
            CallKey(session_id, action.turn_id, action.call_id), action.name, action.arguments
        )

    @classmethod
    def from_item(cls, session_id: str, turn_id: str, item: FunctionCallItem) -> PendingCall:
        return cls(CallKey(session_id, turn_id, item.call_id), item.name, item.arguments)


@dataclass(frozen=True, slots=True)
class InDoubtCall:
    """Given to ``on_in_doubt``: a call that started earlier but left no saved result."""

    key: CallKey
    function_name: str
    arguments: object
    attempts: int


@dataclass(frozen=True, slots=True)
class InDoubtDecision:
    """What to do with a call in doubt; build one with the class methods."""

    kind: Literal["rerun", "fail", "result"]
    value: object = None
    error: str = IN_DOUBT_ERROR

    @classmethod
    def rerun(cls) -> InDoubtDecision:
        """Run the function again: only safe when repeating its effect is harmless.
        Capped by the function's ``max_attempts``: past it, the call fails as in doubt."""
        return cls("rerun")

    @classmethod
    def fail(cls, error: str = IN_DOUBT_ERROR) -> InDoubtDecision:
        """Submit a failed result with ``error`` (the default policy)."""
        return cls("fail", error=error)

    @classmethod
    def result(cls, value: object) -> InDoubtDecision:
        """Submit ``value`` as the successful result, e.g. after checking the effect."""
        return cls("result", value=value)


InDoubtHandler = Callable[[InDoubtCall], InDoubtDecision]
ActionHandler = Callable[[str, RequiredAction], None]
ErrorHook = Callable[[CallKey, BaseException], None]
