"""The call machine's table of moves: drawn in docs/runner.md, and enforced."""

from __future__ import annotations

from pathlib import Path

import pytest

from openagentcore.runner._phases import FIRST, MOVES, IllegalMove, Phase, check_move

ROOT = Path(__file__).resolve().parents[2]


def test_the_docs_draw_the_table_the_core_follows() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "state_diagram", ROOT / "scripts" / "state_diagram.py"
    )
    assert spec is not None
    assert spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    text = (ROOT / "docs" / "runner.md").read_text()
    assert script.redraw(text) == text, "run: python scripts/state_diagram.py"


def test_a_move_not_in_the_table_is_refused_as_a_bug() -> None:
    with pytest.raises(IllegalMove, match=r"done to running.*bug in openagentcore"):
        check_move(Phase.DONE, Phase.RUNNING, "call_1")
    check_move(Phase.QUEUED, Phase.RUNNING, "call_1")


def test_every_phase_is_reached_and_every_call_can_end() -> None:
    onward: dict[Phase, set[Phase]] = {}
    for old, new in MOVES:
        onward.setdefault(old, set()).add(new)
    reached, todo = {FIRST}, [FIRST]
    while todo:
        for new in onward.get(todo.pop(), ()):
            if new not in reached:
                reached.add(new)
                todo.append(new)
    assert reached == set(Phase)
    for phase in Phase:
        seen, todo = {phase}, [phase]
        while todo:
            for new in onward.get(todo.pop(), ()):
                if new not in seen:
                    seen.add(new)
                    todo.append(new)
        assert Phase.DONE in seen, f"a call in {phase.value} can never end"
    assert Phase.DONE not in onward
