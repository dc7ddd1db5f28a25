"""A local Agents API server with a scripted model: no API key, no network.

``with LocalCore() as core:`` serves the API subset the SDK uses on loopback, with
the contract's state machine, events and errors, plus faults on demand for tests.
"""

from __future__ import annotations

from ._faults import Faults
from ._model import FunctionCall, FunctionOutcome, Scenario, TurnScript
from ._schema_examples import example_for_schema
from ._server import LocalCore

__all__ = [
    "Faults",
    "FunctionCall",
    "FunctionOutcome",
    "LocalCore",
    "Scenario",
    "TurnScript",
    "example_for_schema",
]
