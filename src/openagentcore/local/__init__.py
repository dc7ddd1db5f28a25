"""A local Agents API server with a scripted model: no API key, no network.

``LocalCore`` serves the API subset the SDK uses on loopback, with the contract's
state machine, events and errors, plus faults on demand for tests::

    from openagentcore import Client
    from openagentcore.local import Faults, LocalCore

    with LocalCore(faults=Faults(duplicate_every=5)) as core:
        client = Client(api_key=core.api_key, base_url=core.base_url)
        ...

By default each Turn calls every declared function once, all at once, with arguments
generated from its schema, then summarises the results. A :class:`Scenario` scripts
Turns instead; as a file (``openagentcore dev --scenario turns.yaml``)::

    turns:
      - steps:
          - - {name: get_weather, arguments: {city: Paris}}
            - {name: get_time}          # arguments generated from the schema
        answer: "It is {get_time} and {get_weather}."
      - answer: "{summary}"             # a Turn without calls
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
