"""Bounds on what the client accepts from a server: body size, event size, JSON depth.

A broken or hostile server must not be able to exhaust the client's memory or stack:
bodies are read in chunks up to a cap, and JSON is refused past a nesting depth before
anything recursive touches it.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass
from typing import Any, TypeGuard

__all__ = ["JSONTooDeepError", "ResponseLimits", "load_json"]

_MIB = 1024 * 1024
#: Bytes that open or close a JSON container.
_BRACKET_DEPTH = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}
#: Every byte except the four brackets, for ``bytes.translate(None, delete=...)``.
_NOT_BRACKETS = bytes(b for b in range(256) if b not in _BRACKET_DEPTH)
#: A JSON string (where brackets do not count). The closing quote is optional so that an
#: unterminated string matches to the end instead of failing and being rescanned from
#: every escaped quote inside it, which would take quadratic time.
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"?', re.DOTALL)


@dataclass(frozen=True, slots=True)
class ResponseLimits:
    """The most the client accepts from one answer; pass to ``Client(response_limits=)``.

    ``max_body_bytes`` bounds a decoded (decompressed) response body and
    ``max_event_bytes`` one event of a stream; both default to 64 MiB, the contract's
    per-Session event buffer, so no answer a conforming server sends is refused.
    ``max_json_depth`` bounds nesting in any JSON the client parses (bodies, events,
    error envelopes).
    """

    max_body_bytes: int = 64 * _MIB
    max_event_bytes: int = 64 * _MIB
    max_json_depth: int = 256

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_event_bytes", "max_json_depth"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")


class JSONTooDeepError(ValueError):
    """JSON nested deeper than the configured limit."""


def load_json(data: bytes | str, max_depth: int) -> Any:
    """Parse JSON, refusing (``ValueError``) documents nested deeper than ``max_depth``.

    Counting brackets is enough for almost every body; only one with more brackets than
    the limit is scanned for its real depth (outside strings), at C speed.
    """
    if _reads_back_unchanged(data) and data.count("[") + data.count("{") <= max_depth:
        return _parse(data)
    raw = data.encode() if isinstance(data, str) else data
    if raw.count(b"[") + raw.count(b"{") > max_depth:
        brackets = _JSON_STRING.sub(b"", raw).translate(None, delete=_NOT_BRACKETS)
        depth = max(itertools.accumulate(_BRACKET_DEPTH[b] for b in brackets), default=0)
        if depth > max_depth:
            raise JSONTooDeepError(f"JSON nested {depth} deep; the limit is {max_depth}")
    return _parse(raw)


def _reads_back_unchanged(data: bytes | str) -> TypeGuard[str]:
    """Whether ``data`` is text that ``json.loads`` would read back unchanged from its
    UTF-8 bytes, so the round trip through bytes can be skipped: ASCII (no byte order
    mark), without the NUL among the first two bytes from which it guesses UTF-16/32."""
    return isinstance(data, str) and data.isascii() and "\x00" not in data[:2]


def _parse(data: bytes | str) -> Any:
    try:
        return json.loads(data)
    except RecursionError as exc:  # only if max_depth was set above the stack's room
        raise JSONTooDeepError(f"JSON nested too deep to parse: {exc}") from exc
