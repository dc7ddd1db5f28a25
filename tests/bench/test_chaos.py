"""A reduced ``bench/chaos.py`` run: SIGKILLed runners with every emulator fault on."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import chaos

# No budget of their own: the suite's hang guard (120 s) applies. Their time is the
# start-up of seven or four worker processes, which beside a busy core took 61 s, past
# the 60 s they had; no assertion in them depends on how long that takes.


def test_killed_runners_never_run_an_effect_twice_nor_lose_a_call() -> None:
    report = chaos.run(
        kills=6, sessions=2, calls_per_step=3, seed=20261203, effect_seconds=0.05, max_life=0.4
    )
    assert report.kills == 6
    assert report.calls == 2 * chaos.STEPS * 3
    assert report.effects_run_more_than_once == 0
    assert report.calls_lost == 0
    assert report.success_without_effect == 0
    assert report.resubmitted_results_differing == 0
    assert report.conflicts_409 == 0
    assert report.safe()


def test_the_audit_sees_repeated_effects_when_results_are_not_stored() -> None:
    """Proves the audit can fail: without a durable store, kills repeat effects. Each
    kill lands once a call has had its effect and before it returns (not at a random
    instant, which on a busy machine could land before any call had started)."""
    report = chaos.run(
        kills=3,
        sessions=1,
        calls_per_step=3,
        seed=20261203,
        effect_seconds=0.2,
        durable=False,
        kill_after_effect=True,
    )
    assert report.effects_run_more_than_once > 0
    assert not report.safe()
