"""What operators see of calls: one log line when a call starts and one when it settles.

Drivers hand every note the core makes (:class:`CallStarted`, :class:`CallSettled`) to
one :class:`CallObserver`, from their pump, in order.
"""

from __future__ import annotations

import logging

from ..store import CallKey
from ._effects import CallSettled, CallStarted, Note

__all__ = ["CallObserver"]

logger = logging.getLogger("openagentcore.runner.calls")


class CallObserver:
    """Turns the core's notes into log lines (INFO: start and settle of each call)."""

    def __init__(self) -> None:
        self._started: dict[CallKey, float] = {}

    def observe(self, notes: list[Note], now: float) -> None:
        for note in notes:
            if isinstance(note, CallStarted):
                self._started[note.key] = now
                logger.info(
                    "call started: %s call_id=%s session=%s attempt=%d",
                    note.function_name,
                    note.key.call_id,
                    note.key.session_id,
                    note.attempt,
                )
            elif isinstance(note, CallSettled):
                began = self._started.pop(note.key, None)
                duration = "" if began is None else f" duration={now - began:.3f}s"
                logger.info(
                    "call settled: %s call_id=%s session=%s outcome=%s%s",
                    note.function_name,
                    note.key.call_id,
                    note.key.session_id,
                    note.outcome,
                    duration,
                )
