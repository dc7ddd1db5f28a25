"""A griffe extension for the API reference: the package's docstrings use a few
Sphinx-style roles (``:class:`Client```); Markdown would print them raw, so they become
code spans (``Client``) before the docstring is rendered."""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:class|func|meth|attr|data|mod|exc|obj):`~?([^`]+)`")


class RestRoles(griffe.Extension):
    """Rewrites ``:role:`target``` as a code span holding the target's short name."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        """Rewrite the roles of every loaded object's docstring."""
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(_code_span, obj.docstring.value)


def _code_span(match: re.Match[str]) -> str:
    target = match.group(1)
    return f"`{target.rsplit('.', 1)[-1] if match.group(0).count('~') else target}`"
