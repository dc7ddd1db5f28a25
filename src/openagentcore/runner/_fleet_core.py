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
- While a group *forms* (its oldest live worker joined less than a heartbeat interval
  ago), a worker takes no more than its share would be if ``FORMING_ROOM`` more
  workers joined: workers started together see each other's first heartbeats within
  that interval, and the first to join would otherwise take every Session while it
  seems alone and give most of them back as the others join (each move a new event
  stream and more reads of the Session). Groups of up to ``FORMING_ROOM + 1`` workers
  started together so take each Session once.
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
    "FORMING_ROOM",
    "fair_share",
    "formation_left",
    "is_live",
    "may_write",
    "orphans",
    "decide",
    "plan",
]

State = Literal["active", "parked"]

#: While its group forms, a worker takes no more than its share would be with this many
#: more workers: enough to start work, and no more than its final share in a group of
#: up to this many more.
FORMING_ROOM = 3


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
    ``release`` (Sessions it holds, with the epochs it holds them at); plan again in
    ``forming_for`` seconds, when its group has formed and the cap is lifted."""

    acquire: int
    release: tuple[tuple[str, int], ...] = field(default_factory=tuple)
    share: int = 0
    forming_for: float = 0.0


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
    forming_for: float = 0.0,
) -> Plan:
    """What ``me`` should take and give back, given every row of its group.

    ``me`` counts as live even if its own heartbeat is missing from ``workers`` (it
    heartbeats before it plans). Which orphans it gets is the directory's choice
    (``SKIP LOCKED``): the plan says how many. ``forming_for``: see :func:`decide`.
    """
    live = {w.worker_id for w in workers if is_live(w, now, ttl)} | {me}
    active = [s for s in sessions if s.state == "active"]
    mine = [(s.session_id, s.epoch) for s in active if s.owner == me]
    free = sum(1 for s in active if s.owner is None or s.owner not in live)
    return decide(
        mine,
        active=len(active),
        live=len(live),
        free=free,
        slack=slack,
        max_sessions=max_sessions,
        forming_for=forming_for,
    )


def formation_left(group_age: float, settle: float) -> float:
    """Seconds until a group whose oldest live worker joined ``group_age`` seconds ago
    has formed (0 once it has)."""
    return max(0.0, settle - group_age)


def decide(
    mine: Sequence[tuple[str, int]],
    *,
    active: int,
    live: int,
    free: int,
    slack: int = 1,
    max_sessions: int | None = None,
    forming_for: float = 0.0,
) -> Plan:
    """:func:`plan` from counts, as a directory reads them in one query: ``mine`` the
    worker's active Sessions with their epochs, ``live`` the live workers counting
    itself, ``free`` the orphans, ``forming_for`` the seconds until the worker's group
    has formed (see :func:`formation_left`): until then it takes no more than its
    share would be with ``FORMING_ROOM`` more workers."""
    share = fair_share(active, live, max_sessions)
    limit = share + slack if max_sessions is None else min(share + slack, max_sessions)
    held = sorted(mine)
    release: tuple[tuple[str, int], ...] = ()
    if len(held) > limit:
        # Down to the share, not the limit, so the others have room to take them.
        release = tuple(held[share:])
    target = share
    if forming_for > 0:
        target = min(share, fair_share(active, live + FORMING_ROOM, max_sessions))
    acquire = max(0, min(target - len(held), free))
    return Plan(acquire=acquire, release=release, share=share, forming_for=forming_for)
