"""Parameter descriptions from docstrings (Google, NumPy and Sphinx styles).

Only what a JSON Schema needs: the summary, which becomes the function's description,
and the text for each parameter.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field

__all__ = ["ParsedDocstring", "parse_docstring"]

_GOOGLE_HEADER = re.compile(r"^(Args|Arguments|Parameters|Params|Keyword Args):\s*$")
_ANY_GOOGLE_HEADER = re.compile(r"^[A-Z][A-Za-z ]*:\s*$")
_GOOGLE_ITEM = re.compile(r"^\**(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SPHINX_ITEM = re.compile(r"^:param\s+(?:[^:]*\s)?(\w+)\s*:\s*(.*)$")
_NUMPY_ITEM = re.compile(r"^(\w+)\s*(?::.*)?$")


@dataclass(frozen=True, slots=True)
class ParsedDocstring:
    description: str
    params: dict[str, str] = field(default_factory=dict)


def parse_docstring(doc: str | None) -> ParsedDocstring:
    lines = inspect.cleandoc(doc).splitlines() if doc else []
    params: dict[str, str] = {}
    description: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if _GOOGLE_HEADER.match(line):
            i = _google(lines, i + 1, params)
        elif _is_numpy_header(lines, i):
            i = _numpy(lines, i + 2, params)
        elif _SPHINX_ITEM.match(line.strip()):
            i = _sphinx(lines, i, params)
        elif _ANY_GOOGLE_HEADER.match(line) or _is_underlined(lines, i) or line.startswith(":"):
            break  # Returns:, Raises:, Examples ... end the description.
        else:
            description.append(line)
            i += 1
    return ParsedDocstring("\n".join(description).strip(), {k: v for k, v in params.items() if v})


def _google(lines: list[str], i: int, params: dict[str, str]) -> int:
    item_indent: int | None = None
    current: str | None = None
    while i < len(lines):
        line = lines[i]
        if line.strip() and _indent(line) == 0:
            break
        if line.strip():
            indent = _indent(line)
            item = _GOOGLE_ITEM.match(line.strip())
            if item and (item_indent is None or indent <= item_indent):
                item_indent = indent
                current = item.group(1)
                params[current] = item.group(2).strip()
            elif current:
                params[current] = f"{params[current]} {line.strip()}".strip()
        i += 1
    return i


def _numpy(lines: list[str], i: int, params: dict[str, str]) -> int:
    current: str | None = None
    while i < len(lines):
        line = lines[i]
        if _is_underlined(lines, i):
            break
        if line.strip() and _indent(line) == 0:
            item = _NUMPY_ITEM.match(line.strip())
            if not item:
                break
            current = item.group(1)
            params[current] = ""
        elif line.strip() and current:
            params[current] = f"{params[current]} {line.strip()}".strip()
        i += 1
    return i


def _sphinx(lines: list[str], i: int, params: dict[str, str]) -> int:
    current: str | None = None
    while i < len(lines):
        stripped = lines[i].strip()
        item = _SPHINX_ITEM.match(stripped)
        if item:
            current = item.group(1)
            params[current] = item.group(2).strip()
        elif stripped.startswith(":"):
            current = None  # :returns:, :raises: ...
        elif stripped and current and _indent(lines[i]) > 0:
            params[current] = f"{params[current]} {stripped}".strip()
        elif stripped:
            break
        i += 1
    return i


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _is_underlined(lines: list[str], i: int) -> bool:
    if i + 1 >= len(lines) or not lines[i].strip():
        return False
    underline = lines[i + 1].strip()
    return bool(underline) and set(underline) == {"-"}


def _is_numpy_header(lines: list[str], i: int) -> bool:
    return _is_underlined(lines, i) and lines[i].strip().lower() in ("parameters", "args")
