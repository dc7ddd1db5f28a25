"""Deterministic example values for common JSON Schema.

The scripted model needs arguments that a function's ``parameters`` schema accepts,
and JSON answers that a ``text.format`` schema accepts. The same schema always yields
the same value, so tests can assert on it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["example_for_schema"]

_MAX_DEPTH = 16


def example_for_schema(schema: object, *, name: str = "value") -> Any:
    """Return a value that satisfies ``schema``.

    Supports ``type`` (also as a list), ``properties``/``required``, ``enum``, ``const``,
    ``default``, ``examples``, ``items``/``minItems``, ``anyOf``/``oneOf``/``allOf``,
    string/number bounds, and local ``$ref`` into ``$defs`` or ``definitions``.
    ``name`` seeds string values so that different fields get different strings.
    """
    root = schema if isinstance(schema, dict) else {}
    return _Generator(root).example(root, name, 0)


class _Generator:
    def __init__(self, root: dict[str, Any]) -> None:
        self._root = root

    def example(self, schema: object, name: str, depth: int) -> Any:
        if not isinstance(schema, dict) or depth > _MAX_DEPTH:
            return None
        if "$ref" in schema:
            return self.example(self._resolve(schema["$ref"]), name, depth + 1)
        if "const" in schema:
            return schema["const"]
        if "default" in schema:
            return schema["default"]
        enum = schema.get("enum")
        if isinstance(enum, list) and enum:
            return enum[0]
        examples = schema.get("examples")
        if isinstance(examples, list) and examples:
            return examples[0]
        for combinator in ("anyOf", "oneOf"):
            options = schema.get(combinator)
            if isinstance(options, list) and options:
                non_null = [
                    o for o in options if not (isinstance(o, dict) and o.get("type") == "null")
                ]
                return self.example((non_null or options)[0], name, depth + 1)
        all_of = schema.get("allOf")
        if isinstance(all_of, list) and all_of:
            merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
            for part in all_of:
                resolved = (
                    self._resolve(part["$ref"])
                    if isinstance(part, dict) and "$ref" in part
                    else part
                )
                if isinstance(resolved, dict):
                    _merge_into(merged, resolved)
            return self.example(merged, name, depth + 1)
        return self._by_type(schema, name, depth)

    def _by_type(self, schema: dict[str, Any], name: str, depth: int) -> Any:
        kind = schema.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "null")
        if kind is None:
            kind = "object" if "properties" in schema else "array" if "items" in schema else None
        if kind == "object":
            return self._object(schema, depth)
        if kind == "array":
            count = schema.get("minItems", 1)
            count = count if isinstance(count, int) and count >= 0 else 1
            return [self.example(schema.get("items", {}), name, depth + 1) for _ in range(count)]
        if kind == "string":
            return _string(schema, name)
        if kind == "integer":
            return _number(schema, integer=True)
        if kind == "number":
            return _number(schema, integer=False)
        if kind == "boolean":
            return True
        if kind == "null":
            return None
        return name

    def _object(self, schema: dict[str, Any], depth: int) -> dict[str, Any]:
        properties = schema.get("properties")
        if not isinstance(properties, dict):
            return {}
        # Fill every declared property, optional ones included: that is always valid
        # and makes the example more telling.
        return {key: self.example(value, key, depth + 1) for key, value in properties.items()}

    def _resolve(self, ref: object) -> object:
        if not isinstance(ref, str) or not ref.startswith("#"):
            return {}
        node: object = self._root
        for part in ref.lstrip("#").strip("/").split("/"):
            if not part:
                continue
            key = part.replace("~1", "/").replace("~0", "~")
            node = node.get(key) if isinstance(node, dict) else None
        return node if isinstance(node, dict) else {}


def _merge_into(target: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if key == "properties" and isinstance(value, dict):
            target.setdefault("properties", {}).update(value)
        elif key == "required" and isinstance(value, list):
            target["required"] = [*target.get("required", []), *value]
        else:
            target.setdefault(key, value)


def _string(schema: dict[str, Any], name: str) -> str:
    formats = {
        "date-time": "2026-01-01T00:00:00Z",
        "date": "2026-01-01",
        "time": "00:00:00Z",
        "email": "user@example.com",
        "uri": "https://example.com/",
        "uuid": "00000000-0000-4000-8000-000000000000",
    }
    fmt = schema.get("format")
    value = formats.get(fmt, f"example {name}") if isinstance(fmt, str) else f"example {name}"
    min_length = schema.get("minLength")
    max_length = schema.get("maxLength")
    if isinstance(min_length, int) and len(value) < min_length:
        value = value + "x" * (min_length - len(value))
    if isinstance(max_length, int) and len(value) > max_length:
        value = value[:max_length]
    return value


def _number(schema: dict[str, Any], *, integer: bool) -> int | float:
    low = schema.get("minimum")
    exclusive_low = schema.get("exclusiveMinimum")
    high = schema.get("maximum")
    exclusive_high = schema.get("exclusiveMaximum")
    step = 1 if integer else 0.5
    value: float = 1
    if isinstance(low, (int, float)):
        value = max(value, low)
    if isinstance(exclusive_low, (int, float)) and value <= exclusive_low:
        value = exclusive_low + step
    if isinstance(high, (int, float)):
        value = min(value, high)
    if isinstance(exclusive_high, (int, float)) and value >= exclusive_high:
        value = exclusive_high - step
    return int(value) if integer else float(value)
