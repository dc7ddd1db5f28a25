"""What a runner did for a Session, for logs, dashboards and tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic

from typing_extensions import TypeVar

from ..store import CallKey

__all__ = ["OutputT", "ServeReport", "TurnOutputT", "TurnResult"]

#: The type of :attr:`TurnResult.output`; ``Any`` when none is given.
OutputT = TypeVar("OutputT", default=Any)
#: What ``run_turn`` returns in :attr:`TurnResult.output`: an instance of its
#: ``output_type``, or the answer's text without one.
TurnOutputT = TypeVar("TurnOutputT", default=str | None)


@dataclass(slots=True)
class ServeReport:
    """Counts and the calls that need a person's attention.

    ``calls_run`` counts functions this runner executed; ``results_resubmitted`` saved
    results sent again instead of re-running (after a restart or a lost response);
    ``duplicates_skipped`` notifications for calls already handled; ``in_doubt`` calls
    that had started without a saved result; ``conflicts`` calls whose saved result the
    server refused because it holds a different one; ``abandoned`` calls the Turn could
    no longer accept; ``left_pending`` calls to functions this runner does not serve;
    ``store_errors`` times the result store was unreachable (each retried later).
    """

    session_id: str
    calls_run: int = 0
    function_errors: int = 0
    results_submitted: int = 0
    results_resubmitted: int = 0
    duplicates_skipped: int = 0
    reconnects: int = 0
    store_errors: int = 0
    in_doubt: list[CallKey] = field(default_factory=list)
    conflicts: list[CallKey] = field(default_factory=list)
    abandoned: list[CallKey] = field(default_factory=list)
    left_pending: list[CallKey] = field(default_factory=list)
    rejected: list[CallKey] = field(default_factory=list)
    final_status: str | None = None


@dataclass(slots=True)
class TurnResult(Generic[OutputT]):
    """The outcome of :meth:`FunctionRunner.run_turn`.

    ``text`` is the final assistant text; ``output`` the same parsed into
    ``output_type`` when one was given, so ``run_turn(..., output_type=Answer)`` gives a
    ``TurnResult[Answer]`` whose ``output`` type-checks as ``Answer``.
    """

    session_id: str
    turn_id: str
    status: str
    text: str | None
    output: OutputT
    report: ServeReport
