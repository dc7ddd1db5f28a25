"""Request parsing for the emulator's routes: the body gate, input events, list queries.

Checks follow the contract's order and messages (wire-semantics.md, sessions-events.md,
message-content.md); every error names the field to fix and never repeats caller input.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn, TypeVar

from starlette.requests import Request

from .._admission import check_image_url
from .._errors import AdmissionError
from ._engine import ApiError, invalid

__all__ = [
    "ListQuery",
    "canonical_json",
    "creation_messages",
    "idempotency_key",
    "input_events",
    "json_body",
    "kind_of",
    "parse_metadata",
    "reject_unknown",
]

_T = TypeVar("_T")
_K = TypeVar("_K")


def canonical_json(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


async def json_body(request: Request, limit: int) -> dict[str, Any]:
    """The body gate every JSON route passes, in the contract's order."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != "application/json" and not (
        content_type.startswith("application/") and content_type.endswith("+json")
    ):
        raise invalid(
            "expected request with Content-Type: application/json", code="invalid_request_error"
        )
    raw = await request.body()
    if len(raw) > limit:
        raise ApiError(
            413, "request_too_large", f"The request body exceeds the {limit // 1024} KiB limit."
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise invalid(
            "Invalid body: encountered a unicode decode error when parsing this JSON value. "
            "Please check the value to ensure it is valid unicode.",
            code="invalid_request_error",
        ) from None
    if not raw:
        return {}
    duplicates: list[str] = []
    try:
        value = json.loads(
            text,
            object_pairs_hook=functools.partial(_object, duplicates=duplicates),
            parse_constant=_reject_constant,
        )
        _reject_lone_surrogates(value)
    except ValueError:
        raise invalid(_PARSE_ERROR, code="invalid_request_error") from None
    if duplicates:
        key, path = _first_duplicate(text)
        raise invalid(
            f"Invalid body: duplicate JSON key '{key}' at '{path}'. "
            "Duplicate JSON keys are not supported.",
            code="invalid_request_error",
        )
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise invalid(
            f"Invalid type: expected an object, but got {kind_of(value)} instead.",
            code="invalid_request_error",
        )
    _reject_unstorable_text(value)
    return value


_PARSE_ERROR = (
    "Invalid body: failed to parse JSON value. Please check the value to ensure it is "
    "valid JSON. (Common errors include trailing commas, missing closing brackets, "
    "missing quotation marks, etc.)"
)
_UNSTORABLE = (
    "Request text contains characters this service cannot store or compare, such as "
    "U+0000 or invalid UTF-8."
)


def _reject_constant(name: str) -> NoReturn:
    # NaN and Infinity are not JSON; Python's parser accepts them unless told not to.
    raise ValueError(f"not JSON: {name}")


def _object(pairs: list[tuple[str, Any]], *, duplicates: list[str]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        duplicates.append("")
    return result


class _Members(list[tuple[str, Any]]):
    """An object's members in document order, repeats kept."""


def _first_duplicate(text: str) -> tuple[str, str]:
    """The first repeated key in document order and its path: object keys joined with
    ``.``, array indices left out (wire-semantics.md, Request bodies)."""
    found = _duplicate_in("", json.loads(text, object_pairs_hook=_Members))
    assert found is not None, "a duplicate was reported but not found"
    return found


def _duplicate_in(path: str, value: object) -> tuple[str, str] | None:
    if isinstance(value, _Members):
        seen: set[str] = set()
        for key, item in value:
            child = f"{path}.{key}" if path else key
            if key in seen:
                return key, child
            seen.add(key)
            found = _duplicate_in(child, item)
            if found is not None:
                return found
    elif isinstance(value, list):
        for item in value:
            found = _duplicate_in(path, item)
            if found is not None:
                return found
    return None


def _strings(value: object) -> Iterator[str]:
    """Every object key and string value in ``value``."""
    pending: list[object] = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            yield from item.keys()
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)


def _reject_lone_surrogates(value: object) -> None:
    for text in _strings(value):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("a lone UTF-16 surrogate") from None


def _reject_unstorable_text(body: dict[str, Any]) -> None:
    """U+0000 cannot be stored (wire-semantics.md, Validation errors); metadata errors
    name the key, everything else has a null param. Nothing is written."""
    metadata = body.get("metadata")
    if isinstance(metadata, dict):
        for key, item in metadata.items():
            if "\x00" in key or (isinstance(item, str) and "\x00" in item):
                shown = key.replace("\x00", "")
                raise invalid(_UNSTORABLE, param=f"metadata.{shown}", code="invalid_request_error")
    for text in _strings(body):
        if "\x00" in text:
            raise invalid(_UNSTORABLE, code="invalid_request_error")


def kind_of(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def reject_unknown(body: dict[str, Any], allowed: Sequence[str], *, prefix: str = "") -> None:
    for key in body:
        if key not in allowed:
            path = prefix + key
            raise invalid(f"Unknown parameter: '{path}'.", param=path, code="invalid_request_error")


def idempotency_key(request: Request) -> str | None:
    key = request.headers.get("idempotency-key")
    if not key:
        return None
    if len(key.encode()) > 128 or not key.strip():
        raise invalid(
            "Idempotency-Key must be 1 to 128 bytes and not only whitespace.",
            param="Idempotency-Key",
        )
    return key


def parse_metadata(value: object) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise invalid(
            f"Invalid type for 'metadata': expected an object, but got {kind_of(value)} instead.",
            param="metadata",
            code="invalid_request_error",
        )
    for key, item in value.items():
        if not isinstance(item, str):
            raise invalid(
                f"Invalid type for 'metadata.{key}': expected a string, "
                f"but got {kind_of(item)} instead.",
                param=f"metadata.{key}",
                code="invalid_request_error",
            )
    if len(value) > 16:
        raise invalid(
            "Metadata can hold at most 16 pairs.", param="metadata", code="invalid_request_error"
        )
    return dict(value)


# -- input validation ---------------------------------------------------------------------


def creation_messages(raw: object) -> list[dict[str, Any]]:
    if isinstance(raw, str):
        if not raw:
            raise invalid("Initial input must not be an empty string.", param="input")
        return [{"role": "user", "content": [{"type": "input_text", "text": raw}]}]
    return _messages(raw, "input")


def _messages(raw: object, where: str) -> list[dict[str, Any]]:
    if not isinstance(raw, list) or not raw:
        raise invalid(f"'{where}' must be a non-empty array of user messages.", param=where)
    return [_message(message, f"{where}[{index}]") for index, message in enumerate(raw)]


def _message(message: object, where: str) -> dict[str, Any]:
    if not isinstance(message, dict):
        raise invalid(f"'{where}' must be a message object.", param=where)
    reject_unknown(message, ("role", "type", "content"), prefix=f"{where}.")
    if message.get("role") != "user":
        raise invalid(f"'{where}.role' must be 'user'.", param=f"{where}.role")
    if "type" in message and message["type"] != "message":
        raise invalid(f"'{where}.type' must be 'message' when present.", param=f"{where}.type")
    content = message.get("content")
    if not isinstance(content, list) or not content:
        raise invalid(
            f"'{where}.content' must be a non-empty array of content parts.",
            param=f"{where}.content",
        )
    parts = [_content_part(part, f"{where}.content[{index}]") for index, part in enumerate(content)]
    if not any(part["type"] == "input_image" or part["text"] for part in parts):
        raise invalid(
            f"'{where}' needs an image or a non-empty text part.", param=f"{where}.content"
        )
    return dict(message)


def _content_part(part: object, where: str) -> dict[str, Any]:
    if isinstance(part, dict):
        if (
            part.get("type") == "input_text"
            and isinstance(part.get("text"), str)
            and len(part) == 2
        ):
            return part
        if (
            part.get("type") == "input_image"
            and isinstance(part.get("image_url"), str)
            and len(part) == 2
        ):
            try:
                check_image_url(part["image_url"], field=f"{where}.image_url")
            except AdmissionError as error:
                raise invalid(error.message, param=error.field, code=error.code) from None
            return part
    raise invalid(f"'{where}' must be an input_text or input_image part.", param=where)


def input_events(body: dict[str, Any]) -> list[dict[str, Any]]:
    reject_unknown(body, ("events",))
    if "events" not in body:
        raise invalid(
            "Missing required parameter: 'events'.", param="events", code="invalid_request_error"
        )
    events = body["events"]
    if not isinstance(events, list):
        raise invalid(
            f"Invalid type for 'events': expected an array, but got {kind_of(events)} instead.",
            param="events",
            code="invalid_request_error",
        )
    if len(events) > 64:
        raise invalid("A batch holds 1 to 64 events.", param="events")
    checked = [_input_event(event, f"events[{index}]") for index, event in enumerate(events)]
    if len(canonical_json(checked).encode()) > 512 * 1024:
        raise invalid("The stored input of one request can be at most 512 KiB.", param="events")
    return checked


def _input_event(event: object, where: str) -> dict[str, Any]:
    if not isinstance(event, dict):
        raise invalid(
            f"'{where}' must be an event object.", param=where, code="invalid_request_error"
        )
    kind = event.get("type")
    if kind == "agent.session.input.message":
        reject_unknown(event, ("type", "input"), prefix=f"{where}.")
        return {"type": kind, "input": _messages(event.get("input"), f"{where}.input")}
    if kind == "agent.session.input.cancel":
        reject_unknown(event, ("type",), prefix=f"{where}.")
        return dict(event)
    if kind == "agent.session.input.tool_result":
        reject_unknown(
            event, ("type", "turn_id", "call_id", "success", "output", "error"), prefix=f"{where}."
        )
        for name in ("turn_id", "call_id", "success"):
            if name not in event:
                path = f"{where}.{name}"
                raise invalid(
                    f"Missing required parameter: '{path}'.",
                    param=path,
                    code="invalid_request_error",
                )
        if not isinstance(event["turn_id"], str) or not event["turn_id"]:
            raise invalid(
                f"'{where}.turn_id' must be a non-empty Turn ID.", param=f"{where}.turn_id"
            )
        if not isinstance(event["call_id"], str) or not event["call_id"].strip():
            raise invalid(
                f"'{where}.call_id' must be a non-blank call ID.", param=f"{where}.call_id"
            )
        if not isinstance(event["success"], bool):
            raise invalid(f"'{where}.success' must be a boolean.", param=f"{where}.success")
        output = event.get("output")
        if isinstance(output, list):
            for index, part in enumerate(output):
                _content_part(part, f"{where}.output[{index}]")
        elif output is not None and not isinstance(output, str):
            raise invalid(
                f"'{where}.output' must be a string or content parts.", param=f"{where}.output"
            )
        if event.get("error") is not None and not isinstance(event["error"], str):
            raise invalid(f"'{where}.error' must be a string.", param=f"{where}.error")
        # Stored exactly as sent: field presence is part of the result's identity.
        return dict(event)
    raise invalid(
        "Invalid value for 'type': expected agent.session.input.message, "
        "agent.session.input.cancel or agent.session.input.tool_result.",
        param=f"{where}.type",
        code="invalid_request_error",
    )


# -- lists ----------------------------------------------------------------------------------


class ListQuery:
    """``after``/``limit``/``order`` with the Beta list rules (wire-semantics.md)."""

    def __init__(self, request: Request, *, strict_limit: bool) -> None:
        params = request.query_params
        for key in ("after", "limit", "order"):
            if len(params.getlist(key)) > 1:
                raise invalid(
                    f"Failed to deserialize query string: duplicate field `{key}`",
                    code="invalid_request_error",
                )
        self.after = params["after"].strip() if "after" in params else None
        self.limit = _limit(params.get("limit"), strict=strict_limit)
        order = params.get("order", "desc")
        if order not in ("asc", "desc"):
            raise invalid(
                "Failed to deserialize query string: order: unknown variant "
                f"`{order}`, expected `asc` or `desc`",
                code="invalid_request_error",
            )
        self.order = order

    def page(
        self,
        records: Sequence[_T],
        record_id: Callable[[_T], str],
        wire: Callable[[_T], dict[str, Any]],
        *,
        cursor_error: ApiError,
    ) -> dict[str, Any]:
        ordered = list(records) if self.order == "asc" else list(reversed(records))
        if self.after:
            ids = [record_id(record) for record in ordered]
            if self.after not in ids:
                raise cursor_error
            ordered = ordered[ids.index(self.after) + 1 :]
        data = [wire(record) for record in ordered[: self.limit]]
        return {
            "object": "list",
            "data": data,
            "has_more": len(ordered) > self.limit,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
        }

    def page_indexed(
        self,
        index: Sequence[_K],
        record: Callable[[_K], _T | None],
        position: Callable[[str], int | None],
        wire: Callable[[_T], dict[str, Any]],
        *,
        cursor_error: ApiError,
    ) -> dict[str, Any]:
        """:meth:`page` over ``index``, kept in ascending order, reading only the
        records the page shows and one more. ``record`` gives an entry's record, or
        None when the listing hides it; ``position`` the index of the ``after`` record,
        or None when the listing does not show it."""
        forward = self.order == "asc"
        start = 0 if forward else len(index) - 1
        if self.after:
            at = position(self.after)
            if at is None:
                raise cursor_error
            start = at + 1 if forward else at - 1
        steps = range(start, len(index)) if forward else range(start, -1, -1)
        shown: list[_T] = []
        for step in steps:
            found = record(index[step])
            if found is not None:
                shown.append(found)
                if len(shown) > self.limit:
                    break
        data = [wire(found) for found in shown[: self.limit]]
        return {
            "object": "list",
            "data": data,
            "has_more": len(shown) > self.limit,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
        }


def _limit(raw: str | None, *, strict: bool) -> int:
    if raw is None:
        return 20
    digits = raw[1:] if raw.startswith("+") else raw
    if not digits.isdigit():
        raise invalid(
            "Failed to deserialize query string: limit: invalid digit found in string",
            code="invalid_request_error",
        )
    value = int(digits)
    if value >= 2**63:
        raise invalid(
            "Failed to deserialize query string: limit: number too large to fit in target type",
            code="invalid_request_error",
        )
    if strict:
        if not 1 <= value <= 100:
            raise invalid("limit must be between 1 and 100", code="invalid_request_error")
        return value
    return min(max(value, 1), 100)
