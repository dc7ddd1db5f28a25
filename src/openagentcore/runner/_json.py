"""JSON that crosses a trust boundary: the model's arguments in, a function's result out.

The model writes the arguments, so they are parsed with limits on size and nesting
and without the values JSON does not define (``NaN``, ``Infinity``, lone UTF-16
surrogates). A result goes to the server as JSON text, so it is checked the same way
before it is saved: a result the server refuses would leave its call pending.
"""

from __future__ import annotations

import json
import math
import re
from array import array
from collections.abc import Mapping
from itertools import accumulate
from typing import Any

import pydantic
import pydantic_core

__all__ = [
    "MAX_ARGUMENTS_BYTES",
    "MAX_JSON_DEPTH",
    "OutputEncodingError",
    "UntrustedJSONError",
    "check_json_value",
    "encode_output",
    "parse_untrusted_json",
]

#: The largest arguments text parsed, in UTF-8 bytes: it bounds the work one call's
#: arguments can cause. Assign to it to change the limit.
MAX_ARGUMENTS_BYTES = 1024 * 1024
#: The deepest nesting of arrays and objects accepted, far below Python's recursion
#: limit, so neither parsing nor encoding can raise ``RecursionError``.
MAX_JSON_DEPTH = 64

#: A JSON string, where brackets do not count. The closing quote is optional, so a
#: match never fails, and the loop is unrolled (plain characters, then one escape at a
#: time), so there is one way to match and nothing to retry: on an unterminated string
#: of escaped quotes the scan was quadratic (1 MiB took an hour). Not possessive
#: repetitions, which Python 3.10's ``re`` does not have.
_STRINGS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
#: Every byte but the four brackets, for ``bytes.translate(None, delete=...)``.
_NOT_BRACKETS = bytes(byte for byte in range(256) if byte not in b"[]{}")
#: Openers to 1 and closers to -1 as signed bytes (``array("b")``).
_BRACKET_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_CONTENT_TYPES = frozenset({"input_text", "input_image"})


class UntrustedJSONError(ValueError):
    """JSON text or a value that breaks a limit or is not JSON; the text says which
    rule, never the value."""


class OutputEncodingError(ValueError):
    """A function's return value cannot be sent as a result. A ``ValueError``, so code
    that handles unsendable results already handles it."""


def parse_untrusted_json(text: str, *, max_bytes: int | None = None) -> object:
    """Parse ``text`` as strict JSON within :data:`MAX_ARGUMENTS_BYTES` (or
    ``max_bytes``) and :data:`MAX_JSON_DEPTH`.

    Raises :class:`UntrustedJSONError` for anything else, never ``RecursionError``,
    ``UnicodeEncodeError`` or a bare ``ValueError``.
    """
    limit = MAX_ARGUMENTS_BYTES if max_bytes is None else max_bytes
    # A character is at most 4 bytes: only texts near the limit pay for encoding.
    if len(text) > limit or (
        len(text) * 4 > limit and len(text.encode("utf-8", "surrogatepass")) > limit
    ):
        raise UntrustedJSONError(f"larger than {limit} bytes")
    if _nests_too_deep(text):
        raise UntrustedJSONError(f"nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except UntrustedJSONError:
        raise
    except ValueError as exc:
        # Covers malformed text and integers longer than Python converts (3.11+).
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "a number is too long"
        raise UntrustedJSONError(f"not valid JSON ({reason})") from None
    check_json_value(value)
    return value


def check_json_value(value: object) -> None:
    """Raise :class:`UntrustedJSONError` unless ``value`` is plain JSON data: dicts with
    string keys, lists, strings that are valid Unicode, finite numbers, bools and None,
    nested at most :data:`MAX_JSON_DEPTH` levels."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            _check_text(item)
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise UntrustedJSONError("NaN and Infinity are not JSON numbers")
        elif item is None or isinstance(item, (bool, int)):
            continue
        elif isinstance(item, (Mapping, list, tuple)):
            if depth >= MAX_JSON_DEPTH:
                raise UntrustedJSONError(f"nested deeper than {MAX_JSON_DEPTH} levels")
            if isinstance(item, Mapping):
                for key, member in item.items():
                    if not isinstance(key, str):
                        raise UntrustedJSONError("object keys must be strings")
                    _check_text(key)
                    stack.append((member, depth + 1))
            else:
                stack.extend((member, depth + 1) for member in item)
        else:
            raise UntrustedJSONError(f"a {type(item).__name__} is not JSON data")


def encode_output(value: object) -> str | list[dict[str, Any]]:
    """A function's return value as a result ``output``: ``str`` as is, text and image
    content parts as parts, a pydantic model as its compact JSON, anything else as JSON
    text (the same bytes the runner produced before these checks).

    Raises :class:`OutputEncodingError` for NaN or Infinity, lone surrogates, nesting
    deeper than :data:`MAX_JSON_DEPTH`, and values JSON cannot represent; the message
    says what to return instead.
    """
    try:
        if isinstance(value, str):
            _check_text(value)
            return value
        parts = _content_parts(value)
        if parts is not None:
            check_json_value(parts)
            return parts
        data = pydantic_core.to_jsonable_python(value, by_alias=True)
        check_json_value(data)
        if isinstance(value, pydantic.BaseModel):
            return value.model_dump_json(by_alias=True)
        return json.dumps(data, ensure_ascii=False, allow_nan=False)
    except UntrustedJSONError as exc:
        raise OutputEncodingError(
            f"The function's return value cannot be sent as JSON: {exc}. Return a str, "
            "content parts, a pydantic model or plain JSON data."
        ) from None
    except ValueError as exc:  # pydantic's serializer: unknown types, too deep
        raise OutputEncodingError(
            f"The function's return value cannot be sent as JSON ({exc}). Return a str, "
            "content parts, a pydantic model or plain JSON data."
        ) from None


def _content_parts(value: object) -> list[dict[str, Any]] | None:
    """Text and image parts (message-content rules), given as models or dicts."""
    items = value if isinstance(value, (list, tuple)) else [value]
    parts: list[dict[str, Any]] = []
    for item in items:
        data: object = item
        if isinstance(item, pydantic.BaseModel):
            data = item.model_dump(mode="json", by_alias=True, exclude_none=True)
        if not (isinstance(data, Mapping) and data.get("type") in _CONTENT_TYPES):
            return None
        parts.append(dict(data))
    return parts or None


def _refuse_constant(name: str) -> object:
    raise UntrustedJSONError(f"{name} is not a JSON number")


def _check_text(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise UntrustedJSONError("a string holds a lone UTF-16 surrogate") from None


def _nests_too_deep(text: str) -> bool:
    """Whether arrays and objects in JSON ``text`` nest deeper than
    :data:`MAX_JSON_DEPTH`, brackets inside strings ignored."""
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return False  # too few brackets to matter: skip the scan
    outside = _STRINGS.sub("", text).encode("utf-8", "surrogatepass")
    steps = array("b", outside.translate(None, delete=_NOT_BRACKETS).translate(_BRACKET_STEPS))
    return max(accumulate(steps), default=0) > MAX_JSON_DEPTH
