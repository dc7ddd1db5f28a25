"""Which Sessions a fleet worker should take, give back and park: decisions only.

The fleet shares an Agent's Sessions among workers through rows in a directory (one
row per worker with its last heartbeat, one per Session with its owner and epoch).
This module decides from a snapshot of those rows, the worker's name and the
directory's clock; the directories (:mod:`._fleet`) read and write the rows. No I/O
here, so the rules are tested exhaustively and the simulator can run them.

The rules:

- A worker is live while its heartbeat is younger than the TTL (database time).
- A Session is *orphaned* when it is active and its owner is nobody or not live.
- The *fair share* is the active Sessions over the live workers, rounded up (and at
  most ``max_sessions``). A worker takes orphans up to its share, and gives back
  what it holds beyond share + ``slack`` (the slack keeps ownership from flapping
  when workers join and leave); so when a worker joins, only the excess of the others
  moves, and none between them.
- Every ownership write names the owner and epoch the writer believes in; taking a
  Session bumps the epoch, so a worker whose Session was taken (it lapsed) cannot
  release, park or keep it: it is *fenced*.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "Plan",
    "SessionRow",
    "WorkerRow",
    "fair_share",
    "is_live",
    "may_write",
    "orphans",
    "decide",
    "plan",
]

State = Literal["active", "parked"]


@dataclass(frozen=True, slots=True)
class WorkerRow:
    worker_id: str
    #: The directory's clock at the worker's last heartbeat (seconds).
    heartbeat: float


@dataclass(frozen=True, slots=True)
class SessionRow:
    session_id: str
    agent_id: str
    state: State
    owner: str | None
    epoch: int


@dataclass(frozen=True, slots=True)
class Plan:
    """What one worker should do now: take up to ``acquire`` orphans, give back
    ``release`` (Sessions it holds, with the epochs it holds them at)."""

    acquire: int
    release: tuple[tuple[str, int], ...] = field(default_factory=tuple)
    share: int = 0


def is_live(worker: WorkerRow, now: float, ttl: float) -> bool:
    return now - worker.heartbeat < ttl


def may_write(row: SessionRow, owner: str, epoch: int) -> bool:
    """The fence: only the owner at the current epoch may change a Session's row."""
    return row.owner == owner and row.epoch == epoch


def fair_share(active: int, live_workers: int, max_sessions: int | None = None) -> int:
    """Active Sessions over live workers, rounded up; capped by ``max_sessions``."""
    share = math.ceil(active / max(1, live_workers))
    return share if max_sessions is None else min(share, max_sessions)


def orphans(
    sessions: Iterable[SessionRow], workers: Iterable[WorkerRow], now: float, ttl: float
) -> list[SessionRow]:
    """Active Sessions owned by nobody or by a worker that is not live."""
    live = {w.worker_id for w in workers if is_live(w, now, ttl)}
    return [s for s in sessions if s.state == "active" and (s.owner is None or s.owner not in live)]


def plan(
    me: str,
    sessions: Sequence[SessionRow],
    workers: Sequence[WorkerRow],
    now: float,
    *,
    ttl: float,
    slack: int = 1,
    max_sessions: int | None = None,
) -> Plan:
    """What ``me`` should take and give back, given every row of its group.

    ``me`` counts as live even if its own heartbeat is missing from ``workers`` (it
    heartbeats before it plans). Which orphans it gets is the directory's choice
    (``SKIP LOCKED``): the plan says how many.
    """
    live = {w.worker_id for w in workers if is_live(w, now, ttl)} | {me}
    active = [s for s in sessions if s.state == "active"]
    mine = [(s.session_id, s.epoch) for s in active if s.owner == me]
    free = sum(1 for s in active if s.owner is None or s.owner not in live)
    return decide(
        mine, active=len(active), live=len(live), free=free, slack=slack, max_sessions=max_sessions
    )


def decide(
    mine: Sequence[tuple[str, int]],
    *,
    active: int,
    live: int,
    free: int,
    slack: int = 1,
    max_sessions: int | None = None,
) -> Plan:
    """:func:`plan` from counts, as a directory reads them in one query: ``mine`` the
    worker's active Sessions with their epochs, ``live`` the live workers counting
    itself, ``free`` the orphans."""
    share = fair_share(active, live, max_sessions)
    limit = share + slack if max_sessions is None else min(share + slack, max_sessions)
    held = sorted(mine)
    release: tuple[tuple[str, int], ...] = ()
    if len(held) > limit:
        # Down to the share, not the limit, so the others have room to take them.
        release = tuple(held[share:])
    acquire = max(0, min(share - len(held), free))
    return Plan(acquire=acquire, release=release, share=share)
