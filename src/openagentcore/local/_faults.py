"""Faults on demand, so applications can prove they survive what a real server does.

Every fault is off by default and counter-driven, so a test that turns one on sees it
at the same place on every run.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

__all__ = ["Faults", "parse_fault"]

DEFAULT_STREAM_BUFFER = 256
DEFAULT_STREAM_BUFFER_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Faults:
    """Knobs for the emulator's failure modes.

    - ``close_stream_after``: close every event stream after it sent this many events.
    - ``stall_stream_after``: after this many events, every event stream sends nothing
      more, not even keepalives, and stays open: a connection a proxy or a network
      left half-dead. Only a client that times out idle streams gets its events again.
    - ``duplicate_every``: send every n-th event of a stream twice.
    - ``reject_input_every``: answer every n-th input POST with 503 before admitting it.
    - ``lose_input_response_every``: admit every n-th input POST, then answer 503 as if
      the response was lost.
    - ``retry_after``: the ``Retry-After`` seconds sent with those 503 answers; by
      default none is sent, as the server sends none.
    - ``pending_call_delay``: seconds between a ``function_call`` item being sent and
      the call accepting results; results in that window get "Unknown pending tool call."
    - ``receipt_delay``: seconds between a result's admission (202) and its
      application, the Harness's receipt; in that window the call stays in
      ``required_actions`` and no output Item exists yet (message-content.md,
      Application receipts).
    - ``receipt_deadline``: how long the Harness waits for a receipt (10 s, as the
      contract says). A ``receipt_delay`` that reaches it means no receipt comes: at the
      deadline the Turn fails with its application uncertain.
    - ``stream_buffer``: events a stream reader may fall behind before it is cut off
      with ``stream_interrupted``; a small value simulates a slow reader.
    - ``stream_buffer_bytes``: bytes of events a reader may fall behind (one larger
      event is always kept); the contract's 64 MiB by default.
    """

    close_stream_after: int | None = None
    stall_stream_after: int | None = None
    duplicate_every: int | None = None
    reject_input_every: int | None = None
    lose_input_response_every: int | None = None
    retry_after: int | None = None
    pending_call_delay: float = 0.0
    receipt_delay: float = 0.0
    receipt_deadline: float = 10.0
    stream_buffer: int = DEFAULT_STREAM_BUFFER
    stream_buffer_bytes: int = DEFAULT_STREAM_BUFFER_BYTES

    def __post_init__(self) -> None:
        for name in (
            "close_stream_after",
            "stall_stream_after",
            "duplicate_every",
            "reject_input_every",
            "lose_input_response_every",
        ):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"Faults.{name} must be at least 1 or None, got {value}")
        for name in ("stream_buffer", "stream_buffer_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"Faults.{name} must be at least 1, got {getattr(self, name)}")
        for name in ("pending_call_delay", "receipt_delay", "receipt_deadline", "retry_after"):
            if (getattr(self, name) or 0) < 0:
                raise ValueError(f"Faults.{name} cannot be negative")


_SECONDS = ("pending_call_delay", "receipt_delay", "receipt_deadline")


def parse_fault(spec: str, faults: Faults) -> Faults:
    """Apply one ``NAME=VALUE`` CLI fault to ``faults``, e.g. ``duplicate_every=3``."""
    name, sep, raw = spec.partition("=")
    name = name.strip().replace("-", "_")
    fields = {f.name: f for f in dataclasses.fields(Faults)}
    if not sep or name not in fields:
        known = ", ".join(sorted(fields))
        raise ValueError(f"--fault expects NAME=VALUE with NAME one of: {known}; got {spec!r}")
    try:
        value: Any = float(raw) if name in _SECONDS else int(raw)
    except ValueError:
        kind = "a number" if name in _SECONDS else "an integer"
        raise ValueError(f"--fault {name} expects {kind}, got {raw!r}") from None
    return dataclasses.replace(faults, **{name: value})
