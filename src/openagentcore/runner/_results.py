"""Turning a function's return value or exception into a ``tool_result`` event.

The event is built once, saved to the store, and posted exactly as saved: a
resubmission after a crash sends the same bytes, which the server accepts as an
identical retry.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from .._admission import check_tool_result_content
from ..store import CallKey
from ._json import encode_output

__all__ = [
    "CANCELLED_ERROR",
    "ENDED_WITHOUT_RESULT",
    "IN_DOUBT_ERROR",
    "INTERNAL_ERROR",
    "ErrorFormatter",
    "checked_failure_event",
    "failure_event",
    "success_event",
    "timeout_error",
]

TOOL_RESULT = "agent.session.input.tool_result"
#: Sent when a function raised and the application did not opt in to sharing the text:
#: exception messages can hold secrets, and the model only needs to know it failed.
INTERNAL_ERROR = "The function failed. Its error details were not shared."
#: Sent by the default in-doubt policy: a runner took the call on (its function started,
#: or was about to) and was interrupted before recording the outcome, so repeating it
#: could repeat its effect.
IN_DOUBT_ERROR = (
    "The outcome of this call is unknown: its runner was interrupted after taking it on to "
    "run and before recording its outcome, so it may have run; it was not repeated, to avoid "
    "running its effect twice."
)

#: Sent for a call whose function was cancelled (its Turn was cancelled) before it ended.
CANCELLED_ERROR = "The call was cancelled before it finished."

#: Kept as the late outcome of a call that ran past its timeout and then ended without a
#: result (``SystemExit`` or the like): nothing says whether its effect happened.
ENDED_WITHOUT_RESULT = (
    "The function ended without a result after its timeout; its effect may have happened."
)

#: The contract's limit on the stored input of one ``events.create`` request.
MAX_RESULT_BYTES = 512 * 1024

ErrorFormatter = Callable[[BaseException], str]


def timeout_error(seconds: float, *, idempotent: bool) -> str:
    """The failed result of a call that ran past its ``timeout``."""
    text = f"The call timed out after {seconds:g} s."
    if not idempotent:
        text += " Its outcome is unknown: it may have had its effect."
    return text


def _base(key: CallKey, success: bool) -> dict[str, Any]:
    return {"type": TOOL_RESULT, "turn_id": key.turn_id, "call_id": key.call_id, "success": success}


def success_event(key: CallKey, value: object) -> dict[str, Any]:
    """``output`` from a return value: ``str`` as is, content parts as parts, anything
    else as JSON text; ``None`` leaves ``output`` out.

    Raises ``ValueError`` for an output the server would refuse (its size, NUL
    characters, images that are not inline PNG or JPEG, malformed parts): a saved result
    is never replaced, so a refused one would leave the call pending forever.
    """
    event = _base(key, True)
    if value is not None:
        event["output"] = encode_output(value)
        check_tool_result_content(event["output"], success=True)
    # encode_output has refused NaN, Infinity and lone surrogates in the output; ids the
    # store cannot hold are its to refuse.
    _check_size(event)
    return event


def failure_event(key: CallKey, error: str) -> dict[str, Any]:
    event = _base(key, False)
    event["error"] = error
    return event


def checked_failure_event(key: CallKey, error: object) -> dict[str, Any]:
    """``failure_event`` for text from outside the SDK (an ``error_formatter``, the
    ``on_in_doubt`` hook, a person at the CLI).

    Raises ``ValueError`` for text that is not a string, that the server would refuse
    (NUL characters, over its size limit), or that cannot be sent as UTF-8 (a lone
    surrogate, e.g. from a file name decoded with ``surrogateescape``).
    """
    check_tool_result_content(None, error, success=False)
    assert isinstance(error, str)
    try:
        error.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(
            "error: the text holds a lone surrogate, which cannot be sent as UTF-8; "
            "decode bytes with errors='replace' before putting them in the text."
        ) from None
    event = failure_event(key, error)
    _check_size(event)
    return event


def _check_size(event: dict[str, Any]) -> None:
    # Measured as the server measures stored input: compact JSON, non-ASCII escaped.
    size = len(json.dumps(event, separators=(",", ":")))
    if size > MAX_RESULT_BYTES:
        raise ValueError(
            f"The result is {size} bytes of JSON; the server stores at most "
            f"{MAX_RESULT_BYTES // 1024} KiB per request. Return less, or store the "
            "data elsewhere and return a reference to it."
        )
