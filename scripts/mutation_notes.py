"""Why each mutant the simulator lets survive survives: equivalent, or a gap in the tests.

``scripts/mutation.py --markdown`` asks :func:`classify` about every survivor. The notes
are written by reading each survivor against the code (docs/mutation.md explains the
classes); rules that hold for whole kinds of mutant come first, then notes per function,
then notes per mutant, which win over both.
"""

from __future__ import annotations

import re

EQUIVALENT = "equivalent"
GAP = "gap"

#: Per mutant (its name without the module), the class and the one-line reason.
MUTANT_NOTES: dict[str, tuple[str, str]] = {}

#: Per function (mangled name, e.g. ``xǁRunnerCoreǁstop``), for its survivors on lines
#: the simulator runs: the class and the reason or the scenario that would kill them.
FUNCTION_NOTES: dict[str, tuple[str, str]] = {}

#: Per function, the scenario that would reach its lines the simulator never runs.
UNREACHED_NOTES: dict[str, str] = {}

_QUOTED = re.compile(r"""(?:[rbuf]*)("[^"]*"|'[^']*')""")


def classify(name: str, before: str, after: str, reached: bool) -> tuple[str, str]:
    """(class, reason) of one surviving mutant."""
    short = name.rsplit(".", 1)[-1]
    function = short.partition("__mutmut_")[0]
    if short in MUTANT_NOTES:
        return MUTANT_NOTES[short]
    if _only_text_changed(before, after):
        return GAP, "message text only: no test reads this wording (a unit test's job)"
    if not reached:
        scenario = UNREACHED_NOTES.get(function, "no seed runs this line")
        return GAP, f"not reached: {scenario}"
    if function in FUNCTION_NOTES:
        return FUNCTION_NOTES[function]
    return GAP, "reached, yet no check of the simulator notices (not yet analysed)"


def _only_text_changed(before: str, after: str) -> bool:
    """Whether the mutant only rewrote the words of a message (a string with a space)."""
    old, new = _QUOTED.findall(before), _QUOTED.findall(after)
    if len(old) != len(new) or _QUOTED.sub('""', before) != _QUOTED.sub('""', after):
        return False
    changed = [(a, b) for a, b in zip(old, new, strict=True) if a != b]
    return bool(changed) and all(" " in a.strip("\"'") for a, _ in changed)
