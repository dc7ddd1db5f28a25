"""Serving the function calls agents make: registration, dispatch and reconciliation."""

from ._async import AsyncFunctionRunner
from ._base import RunnerError, ServeTimeout
from ._context import CallContext, Cancellation, current_call
from ._fleet import FleetReport
from ._output import StructuredOutputError, structured_output
from ._registry import ArgumentsError, RegisteredFunction
from ._report import ServeReport, TurnResult
from ._results import IN_DOUBT_ERROR, INTERNAL_ERROR
from ._sync import FunctionRunner
from ._types import InDoubtCall, InDoubtDecision, PendingCall

__all__ = [
    "IN_DOUBT_ERROR",
    "INTERNAL_ERROR",
    "ArgumentsError",
    "AsyncFunctionRunner",
    "CallContext",
    "Cancellation",
    "FleetReport",
    "FunctionRunner",
    "InDoubtCall",
    "InDoubtDecision",
    "PendingCall",
    "RegisteredFunction",
    "RunnerError",
    "ServeTimeout",
    "ServeReport",
    "StructuredOutputError",
    "TurnResult",
    "current_call",
    "structured_output",
]
