"""The store, watched: every change a runner or a person makes to a record is checked as
it lands, against what docs/fleet.md ("What the store guarantees") and docs/operations.md
("A call's life in the store") promise of a record.

The checks name who made the change (the runner whose store effect is being performed,
or the operator's ``calls resolve``), so a label can be checked against its author: a
result answered by a runner's in-doubt policy must be what that runner's policy
answers (its ``on_in_doubt`` hook, or the failure "outcome unknown").
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

from openagentcore.runner._results import IN_DOUBT_ERROR
from openagentcore.store import CallKey, CallRecord, CallState, Claim, MemoryResultStore, _rules
from openagentcore.store._records import MANUAL_RERUN, arguments_hash

from ._tasks import Violation

if TYPE_CHECKING:
    from ._runner import SimRunner
    from ._world import World

__all__ = ["AuditedStore", "produced"]

#: How far forward a state may move: a record never goes to a lower rank. ``started``
#: and ``in_doubt`` (no result) come before any result; ``rejected`` sits beside
#: ``submitted`` but never goes back to it; ``applied`` and ``abandoned`` are final.
_RANK = {
    CallState.STARTED: 0,
    CallState.IN_DOUBT: 0,
    CallState.COMPLETED: 1,
    CallState.SUBMITTED: 2,
    CallState.REJECTED: 3,
    CallState.APPLIED: 4,
    CallState.ABANDONED: 4,
}
#: What a runner may write in ``settled_by``; ``manual:...`` is a person's alone.
_BY_RUNNERS = frozenset({None, "rerun", "failed", "result", "finished", MANUAL_RERUN})
#: Fields a record keeps from its claim on.
_FIXED = ("key", "function_name", "arguments_hash", "idempotency_key", "created_at")


def produced(name: str, arguments: str) -> str:
    """What the simulated function ``name`` returns for these arguments."""
    return f"{name}d {json.loads(arguments)['order']}"


class AuditedStore(MemoryResultStore):
    """The memory store (records kept as the SQL stores' rows), every change checked."""

    def __init__(self, world: World) -> None:
        super().__init__(clock=world.store_now)
        self.world = world
        #: The runner whose store effect is being performed, or None for the operator.
        self.caller: SimRunner | None = None

    def claim(
        self,
        key: CallKey,
        *,
        function_name: str,
        arguments_hash: str,
        owner: str,
        lease_seconds: float,
    ) -> Claim:
        claim = super().claim(
            key,
            function_name=function_name,
            arguments_hash=arguments_hash,
            owner=owner,
            lease_seconds=lease_seconds,
        )
        if claim.won:
            self._check_claim(claim.record)
            self.world.claim_granted(owner, key)
        return claim

    def take_over(
        self, key: CallKey, *, owner: str, lease_seconds: float, expected_attempts: int
    ) -> Claim:
        claim = super().take_over(
            key, owner=owner, lease_seconds=lease_seconds, expected_attempts=expected_attempts
        )
        if claim.won:
            self.world.granted.add((owner, key, claim.record.attempts))
        return claim

    def _update(
        self,
        key: CallKey,
        decide: Callable[[CallRecord, float], _rules.Decision],
        **texts: str | None,
    ) -> tuple[CallRecord, bool]:
        seen: list[tuple[CallRecord, float]] = []

        def watched(current: CallRecord, now: float) -> _rules.Decision:
            seen.append((current, now))
            return decide(current, now)

        record, changed = super()._update(key, watched, **texts)
        if changed:
            before, now = seen[0]
            self._check_change(before, self.get(key), now)
        return record, changed

    # -- the checks ----------------------------------------------------------------------

    def _fail(self, record: CallRecord, what: str) -> None:
        who = "the operator" if self.caller is None else self.caller._core.owner
        world = self.world
        if world.broken is None:
            world.broken = Violation(f"seed {world.seed}: {who} on {record.key.call_id}: {what}")
        raise world.broken

    def _check_claim(self, record: CallRecord) -> None:
        world, runner = self.world, self.caller
        now = world.store_now()
        call = world.server.call(record.key)
        if runner is None or call is None:
            self._fail(record, "a claim made by no runner, or of a call no Turn asked for")
            return
        expected = (
            CallState.STARTED,
            1,
            runner._core.owner,
            now + runner._core.lease_seconds,
            now,
            now,
            call.name,
            arguments_hash(call.arguments),
        )
        actual = (
            record.state,
            record.attempts,
            record.owner,
            record.lease_expires_at,
            record.created_at,
            record.updated_at,
            record.function_name,
            record.arguments_hash,
        )
        if actual != expected:
            self._fail(record, f"claimed as {actual}, not {expected}")
        holder = world.idempotency_keys.setdefault(record.idempotency_key, record.key)
        if not record.idempotency_key or holder != record.key:
            self._fail(record, f"claimed with a key another call has: {record.idempotency_key!r}")
        if record.settled_by is not None or record.in_doubt_at is not None or record.history:
            self._fail(record, "a fresh claim carries a settlement")

    def _check_change(self, before: CallRecord, after: CallRecord | None, now: float) -> None:
        runner = self.caller
        if after is None:
            # Only a first claim given back before its function started leaves no trace.
            # (An idempotent function another worker started as its own claim of the call
            # was sent, a claim the store never granted, did not start under this one.)
            world = self.world
            first_runs = sum(
                1
                for worker in world.workers
                for started, attempt in worker.runner.started
                if started == before.key and attempt == 1
            )
            unclaimed = sum(
                1
                for run in world.early_runs
                if run.key == before.key and not run.granted and run.owner != before.owner
            )
            if (
                runner is None
                or before.state is not CallState.STARTED
                or before.attempts != 1
                or before.owner != runner._core.owner
                or first_runs > unclaimed
            ):
                self._fail(before, f"the record was deleted (it was {before})")
            return
        if (
            runner is not None
            and not self.world.chaos
            and (
                after.state is CallState.IN_DOUBT
                or (before.state is CallState.IN_DOUBT and before.settled_by != MANUAL_RERUN)
            )
        ):
            self.world.found_in_doubt.add((runner.worker.generation, after.key))
        for name in _FIXED:
            if getattr(after, name) != getattr(before, name):
                self._fail(after, f"{name} changed from {getattr(before, name)!r}")
        if after.updated_at != now:
            self._fail(after, f"changed at {now}, but updated_at says {after.updated_at}")
        if before.result is not None and after.result != before.result:
            self._fail(after, "a saved result was replaced")
        if before.state in (CallState.APPLIED, CallState.ABANDONED) and (
            after.state,
            after.result,
            after.owner,
            after.attempts,
            after.settled_by,
        ) != (before.state, before.result, before.owner, before.attempts, before.settled_by):
            self._fail(after, f"a settled call ({before.state.value}) changed")
        self._check_state(before, after)
        self._check_attempts(before, after, now)
        self._check_times(before, after, now)
        if after.history[: len(before.history)] != before.history:
            self._fail(after, "a person's earlier decision was erased from the history")
        if len(after.history) > len(before.history) and runner is not None:
            self._fail(after, "a runner wrote a person's decision into the history")
        if runner is None and len(after.history) != len(before.history) + 1:
            # docs/operations.md: each `calls resolve` is appended to the history.
            self._fail(after, "a person's decision was not appended to the history")
        changed_label = after.settled_by != before.settled_by
        if runner is not None and changed_label and after.settled_by not in _BY_RUNNERS:
            self._fail(after, f"a runner labelled it settled by {after.settled_by!r}")
        if before.result is None and after.result is not None:
            self._check_result(before, after)
        kept_late = before.late_outcome is None and after.late_outcome is not None
        if kept_late and (runner is None or after.late_at != now):
            self._fail(after, f"a late outcome kept at {after.late_at}, not now ({now})")

    def _check_state(self, before: CallRecord, after: CallRecord) -> None:
        old, new = before.state, after.state
        if _RANK[new] < _RANK[old]:
            self._fail(after, f"moved backwards: {old.value} -> {new.value}")
        if old is CallState.REJECTED and new not in (
            CallState.REJECTED,
            CallState.APPLIED,
            CallState.ABANDONED,
        ):
            self._fail(after, f"a rejected call moved to {new.value}")
        if new is not CallState.ABANDONED and after.has_result() != (_RANK[new] > 0):
            self._fail(after, f"{new.value}, with a saved result {after.result}")
        if after.has_result() and after.lease_expires_at is not None:
            self._fail(after, "a call with a result still holds a lease")
        if new is CallState.IN_DOUBT and after.in_doubt_at is None:
            self._fail(after, "in doubt, with no in_doubt_at")

    def _check_attempts(self, before: CallRecord, after: CallRecord, now: float) -> None:
        runner = self.caller
        owner = None if runner is None else runner._core.owner
        if after.attempts == before.attempts + 1:
            # A take-over: by the runner that will run it, on a fresh lease.
            if (
                after.state is not CallState.STARTED
                or after.owner != owner
                or runner is None
                or after.lease_expires_at != now + runner._core.lease_seconds
            ):
                self._fail(after, f"attempt {after.attempts} taken as {after}")
            if before.state is CallState.STARTED and before.owner != owner:
                lease = before.lease_expires_at
                if lease is not None and lease > now:
                    self._fail(after, f"took over a live claim of {before.owner}")
            if after.settled_by != ("rerun" if before.settled_by != MANUAL_RERUN else MANUAL_RERUN):
                self._fail(after, f"taken over, labelled settled by {after.settled_by!r}")
        elif after.attempts == before.attempts - 1:
            # A claim given back: its function never started, the earlier doubt stays,
            # and so does a person's "run it again" (the take-over labelled it so, and
            # nothing ran it); a runner's take-over label goes with the attempt.
            if (
                before.state is not CallState.STARTED
                or before.owner != owner
                or after.state is not CallState.IN_DOUBT
                or before.attempts in self.world.started_attempts(before.key)
                or after.settled_by != (MANUAL_RERUN if before.settled_by == MANUAL_RERUN else None)
            ):
                self._fail(after, f"attempt {before.attempts} given back as {after}")
        elif after.attempts != before.attempts:
            self._fail(after, f"attempts went from {before.attempts} to {after.attempts}")
        elif after.owner != before.owner:
            # Else only a person's decision (no owner), or a result saved by its runner.
            by_hand = runner is None and after.owner is None
            saved = before.result is None and after.result is not None and after.owner == owner
            if not (by_hand or saved):
                self._fail(after, f"owner changed from {before.owner} to {after.owner}")
        lease = after.lease_expires_at
        fresh = None if runner is None else now + runner._core.lease_seconds
        if (
            lease is not None
            and lease != before.lease_expires_at
            and (after.owner != owner or lease != fresh)
        ):
            self._fail(after, f"lease set to {lease} at {now}")

    def _check_times(self, before: CallRecord, after: CallRecord, now: float) -> None:
        if before.in_doubt_at is not None and after.in_doubt_at != before.in_doubt_at:
            self._fail(after, "in_doubt_at changed")
        if before.in_doubt_at is None and after.in_doubt_at not in (None, now):
            self._fail(after, f"found in doubt at {now}, but in_doubt_at says {after.in_doubt_at}")
        if (after.late_outcome is None) != (after.late_at is None):
            self._fail(after, "a late outcome without its time, or the reverse")
        if before.late_outcome is not None and (after.late_outcome, after.late_at) != (
            before.late_outcome,
            before.late_at,
        ):
            self._fail(after, "a kept late outcome changed")
        if len(after.history) > len(before.history):
            entry = after.history[-1]
            expected = {
                "at": now,
                "settled_by": after.settled_by,
                "state": before.state.value,
                "attempts": before.attempts,
                "owner": before.owner,
            }
            if entry != expected:
                self._fail(after, f"the decision is recorded as {entry}, not {expected}")
            if (
                before.state in (CallState.STARTED, CallState.IN_DOUBT)
                and after.in_doubt_at is None
            ):
                self._fail(after, "settled by hand as in doubt, with no in_doubt_at")

    def _check_result(self, before: CallRecord, after: CallRecord) -> None:
        """A result is saved: who saved it, and its label, must fit what it says."""
        from ._runner import (
            CHECKED_BY_THE_APPLICATION,
            FAILED_BY_THE_APPLICATION,
            MAX_ATTEMPTS,
            _checking_hook,
            _failing_hook,
            _rerunning_hook,
        )

        world, runner = self.world, self.caller
        result = after.result
        assert result is not None
        call = world.server.call(after.key)
        assert call is not None
        output = result.get("output")
        own = result["success"] is True and output == produced(call.name, call.arguments)
        if runner is None:
            if not after.settled_by or not after.settled_by.startswith("manual:"):
                self._fail(after, f"a person's result labelled {after.settled_by!r}")
            return
        if own and world.runs[after.key] < 1:
            self._fail(after, "a success saved for a function that never ran")
        error = result.get("error") if result["success"] is False else None
        policy = error in (IN_DOUBT_ERROR, FAILED_BY_THE_APPLICATION)
        checked = result["success"] is True and output == CHECKED_BY_THE_APPLICATION
        if policy or checked:
            if before.state is not CallState.IN_DOUBT:
                self._fail(after, f"an in-doubt answer saved for a {before.state.value} call")
            hook = runner._on_in_doubt
            asked = call.name == "charge"  # an idempotent call is rerun, never asked about
            if checked != (hook is _checking_hook and asked) or (
                error == FAILED_BY_THE_APPLICATION
            ) != (hook is _failing_hook and asked):
                self._fail(after, f"its runner's in-doubt policy ({hook}) did not answer {result}")
            rerun = call.name == "reserve" or (hook is _rerunning_hook and asked)
            if rerun and before.attempts < MAX_ATTEMPTS:
                self._fail(after, f"rerun asked, failed in doubt after {before.attempts} attempts")
            label = "failed" if policy else "result"
            if after.settled_by != label:
                self._fail(after, f"answered in doubt, labelled {after.settled_by!r}")
        elif before.state is CallState.IN_DOUBT and before.settled_by != MANUAL_RERUN:
            if after.settled_by != "finished":
                self._fail(after, f"its own run finished, labelled {after.settled_by!r}")
        elif after.settled_by != before.settled_by and not (
            before.settled_by == MANUAL_RERUN and after.settled_by is None
        ):
            self._fail(after, f"a run's result relabelled it {after.settled_by!r}")
