"""Function and parameter descriptions from docstrings, parsed by ``docstring_parser``.

Google, NumPy and Sphinx/reST styles are recognised wherever their sections appear: a
``Returns:`` or ``Example:`` before ``Args:`` does not hide the parameters.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import docstring_parser

__all__ = ["ParsedDocstring", "parse_docstring"]


@dataclass(frozen=True, slots=True)
class ParsedDocstring:
    description: str
    params: dict[str, str] = field(default_factory=dict)


def parse_docstring(doc: str | None) -> ParsedDocstring:
    """The summary and long description (the function's description) and the text of
    each documented parameter, with wrapped lines joined by spaces."""
    if not doc:
        return ParsedDocstring("")
    # Of the styles that parse, the library keeps the one that finds the most sections;
    # the NumPy parser accepts any text, so this never raises.
    parsed = docstring_parser.parse(inspect.cleandoc(doc))
    separator = "\n\n" if parsed.blank_after_short_description else "\n"
    description = separator.join(
        part for part in (parsed.short_description, parsed.long_description) if part
    )
    params = {
        param.arg_name.lstrip("*"): " ".join(param.description.split())
        for param in parsed.params
        if param.description and param.description.strip()
    }
    return ParsedDocstring(description.strip(), params)
