"""A call's phases in one runner, and the moves between them, as a table.

The core moves a call only along :data:`MOVES` (h11 keeps its connection states the
same way): a move that is not in the table is a bug, and the core refuses it instead
of carrying on from a state nobody reasoned about. docs/runner.md draws the table; a
test keeps the drawing and the table the same.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

__all__ = ["FIRST", "MOVES", "IllegalMove", "Phase", "check_move", "state_diagram"]


class Phase(str, enum.Enum):
    """Where one call is in this runner. Every phase but ``POSTED`` and ``DONE`` keeps
    its Session busy: a serve does not end on it without saying so."""

    #: A claim was sent to the store (an idempotent function may have run already,
    #: its outcome waiting for the claim's answer).
    CLAIMING = "claiming"
    #: Reading the record of a call this runner cannot run (or must re-check).
    LOOKING = "looking"
    #: Marking a started call without a result in doubt (compare-and-set).
    MARKING_IN_DOUBT = "marking_in_doubt"
    #: Waiting for the application's ``on_in_doubt`` decision.
    DECIDING = "deciding"
    #: Re-claiming a call in doubt to run it again.
    TAKING_OVER = "taking_over"
    #: To be claimed (or taken over) once a concurrency slot is free. Nothing is
    #: written for it yet: a claim never waits behind ``max_concurrency``, so a record
    #: ``started`` means its function starts at once (another worker judging it stale
    #: is right to say it may have run).
    WAITING = "waiting"
    #: Claimed (lease held) with a slot kept for it; starts once the lease is confirmed
    #: to be ours for long enough (``START_LEASE_SHARE``).
    QUEUED = "queued"
    #: The function runs (lease held; an idempotent function's claim may still be on
    #: its way: it started as the claim was sent).
    RUNNING = "running"
    #: Saving the result (lease held until saved).
    SAVING = "saving"
    #: Saved (an idempotent function's result: being saved), to be posted.
    READY = "ready"
    #: In a POST in flight.
    POSTING = "posting"
    #: A POST failed for a reason that may pass; posted again at ``not_before``.
    BACKOFF = "backoff"
    #: Giving back a claim whose function never started.
    RELEASING = "releasing"
    #: Accepted by the server (202), not yet seen applied.
    POSTED = "posted"
    #: Nothing more for this runner to do.
    DONE = "done"


#: The phase a call is born in, before its first move (announced, not yet acted on).
FIRST = Phase.LOOKING

_P = Phase

#: Every move the core makes, and why. Kept in the order the diagram draws them. Every
#: move here was made by the simulator's 2,000 seeds or the runner and CLI tests, except
#: the answers to a lost take-over, which are decided from the record as a lost claim's.
MOVES: Mapping[tuple[Phase, Phase], str] = {
    # A call is announced; the store decides who runs it.
    (_P.LOOKING, _P.WAITING): "served here: waits for a slot (new, or in doubt and may rerun)",
    (_P.LOOKING, _P.CLAIMING): "its record vanished: claim it afresh",
    (_P.LOOKING, _P.READY): "a saved result exists (resubmit)",
    (_P.LOOKING, _P.SAVING): "settled by a person, or answered by the in-doubt policy",
    (_P.LOOKING, _P.DECIDING): "in doubt: on_in_doubt decides",
    (_P.LOOKING, _P.DONE): "left to another worker, or already applied",
    (_P.LOOKING, _P.MARKING_IN_DOUBT): "started, no result, owner gone",
    (_P.WAITING, _P.CLAIMING): "a concurrency slot is free: claim it",
    (_P.WAITING, _P.TAKING_OVER): "a concurrency slot is free: take it over",
    (_P.WAITING, _P.DONE): "its Turn is over, or its serve ended, before a slot was free",
    (_P.WAITING, _P.RUNNING): "idempotent: claimed and started at once (the claim's answer "
    "comes while it runs)",
    (_P.CLAIMING, _P.QUEUED): "claim won (lease held)",
    (_P.CLAIMING, _P.READY): "a saved result exists (resubmit); or an idempotent run's "
    "claim won: posted as it is saved",
    (_P.CLAIMING, _P.MARKING_IN_DOUBT): "started, no result, owner gone",
    (_P.CLAIMING, _P.DECIDING): "already in doubt: on_in_doubt decides",
    (_P.CLAIMING, _P.WAITING): "already in doubt, may run again: waits for a slot",
    (_P.CLAIMING, _P.SAVING): "already in doubt: the policy's failure; or refused by the store",
    (_P.CLAIMING, _P.RELEASING): "its Turn ended while the claim was in flight",
    (_P.CLAIMING, _P.DONE): "applied, abandoned or rejected; or held by a live worker",
    # A call in doubt: exactly one worker decides (compare-and-set).
    (_P.MARKING_IN_DOUBT, _P.WAITING): "idempotent, attempts below max_attempts",
    (_P.MARKING_IN_DOUBT, _P.DECIDING): "on_in_doubt hook",
    (_P.MARKING_IN_DOUBT, _P.SAVING): 'default: failed, "outcome unknown"',
    (_P.MARKING_IN_DOUBT, _P.LOOKING): "moved by another worker, or gone: read it again",
    (_P.DECIDING, _P.SAVING): "fail / result / rerun past max_attempts",
    (_P.DECIDING, _P.WAITING): "rerun, attempts below max_attempts: waits for a slot",
    (_P.TAKING_OVER, _P.QUEUED): "take-over won",
    (_P.TAKING_OVER, _P.READY): "a saved result exists after all (resubmit)",
    (_P.TAKING_OVER, _P.RELEASING): "its Turn ended while the take-over was in flight",
    # A take-over that lost is decided from the record, as a claim that lost is.
    (_P.TAKING_OVER, _P.DONE): "applied, abandoned or rejected meanwhile",
    (_P.TAKING_OVER, _P.WAITING): "cleared to run again, or still in doubt: waits again",
    (_P.TAKING_OVER, _P.DECIDING): "another worker put it in doubt again: on_in_doubt decides",
    (_P.TAKING_OVER, _P.SAVING): "in doubt again, past what may run: the policy's failure",
    (_P.TAKING_OVER, _P.MARKING_IN_DOUBT): "another worker took it over, then was lost",
    (_P.TAKING_OVER, _P.LOOKING): "its record vanished (a claim given back): read it again",
    # Running under a lease.
    (_P.QUEUED, _P.RUNNING): "the lease is surely still held",
    (_P.QUEUED, _P.RELEASING): "its serve ended, or its Turn is over, before it started",
    (_P.RELEASING, _P.DONE): "claim given back, never ran",
    (_P.RUNNING, _P.SAVING): "returned, raised, timed out or cancelled",
    (_P.RUNNING, _P.MARKING_IN_DOUBT): "ended without a result (SystemExit)",
    (_P.RUNNING, _P.READY): "idempotent: returned, raised or timed out; posted as it is saved",
    (_P.RUNNING, _P.CLAIMING): "idempotent, claim unanswered: ended first (its outcome waits "
    "for the answer); or the claim lost or was refused (the run is dropped)",
    (_P.SAVING, _P.READY): "saved (the first saved result wins)",
    (_P.SAVING, _P.WAITING): "the save found it cleared to run again by hand",
    (_P.SAVING, _P.DONE): "the save found its result refused for good, or it settled",
    # Posting the saved result.
    (_P.READY, _P.POSTING): "in the Session's next batch",
    (_P.READY, _P.DONE): "its Turn is known cancelled (abandoned), or its Session is gone",
    (_P.POSTING, _P.POSTED): "202",
    (_P.POSTING, _P.READY): "its batch is sent again at once (split, or redirected)",
    (_P.POSTING, _P.BACKOFF): "5xx, connection error, unrecognised 409",
    (_P.POSTING, _P.DONE): "conflict, Turn cannot accept, or refused (rejected)",
    (_P.BACKOFF, _P.POSTING): "its backoff is over",
    (_P.BACKOFF, _P.DONE): "refused as too early, then its Turn known cancelled (abandoned); "
    "or its Session is gone (404)",
    (_P.POSTED, _P.DONE): "output Item seen (applied)",
}


class IllegalMove(RuntimeError):
    """The core tried a move the table does not have: a bug in openagentcore."""


def check_move(old: Phase, new: Phase, call_id: str) -> None:
    if (old, new) not in MOVES:
        raise IllegalMove(
            f"Call {call_id} would move from {old.value} to {new.value}, which the "
            "runner's call machine does not allow. This is a bug in openagentcore: "
            "please report it with the runner's log."
        )


def state_diagram() -> str:
    """The table as a mermaid state diagram (what docs/runner.md shows)."""
    lines = ["stateDiagram-v2", f"    [*] --> {FIRST.value}: announced"]
    for (old, new), why in MOVES.items():
        lines.append(f"    {old.value} --> {new.value}: {why}")
    lines.append(f"    {Phase.DONE.value} --> [*]")
    return "\n".join(lines)
