"""The fleet simulator's cold starts (:mod:`._fleet`): workers started together over a
backlog take each Session once, and the check catches a fleet that does not wait for
its group to form."""

from __future__ import annotations

import pytest

from ._fleet import FleetWorld, run_fleet_seed
from ._tasks import Violation
from .test_sim import CI_SEEDS


def _no_formation(world: FleetWorld) -> None:
    """Reverts the formation: the first worker to join takes its whole share while it
    seems alone, and gives most of it back as the others join."""
    world.settle = 0.0


def test_the_cold_start_check_catches_a_fleet_that_takes_before_its_group_forms() -> None:
    caught = ""
    for seed in range(CI_SEEDS):
        try:
            run_fleet_seed(seed, _no_formation)
        except Violation as found:
            caught = str(found)
            break
    if not caught:
        pytest.fail(f"{_no_formation.__name__} went unnoticed in {CI_SEEDS} fleet histories")
    assert "more than once" in caught


def test_cold_starts_share_a_backlog_among_every_worker() -> None:
    """Proof that the cold starts test something: their backlogs are spread over
    several workers, each taking a part."""
    spread = 0
    for seed in range(50):
        world = FleetWorld(seed, cold_start=True).run()
        owners = set(world.owners.values())
        spread += len(owners) == len(world.workers) > 1
    assert spread >= 40
