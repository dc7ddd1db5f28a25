"""The runner core's call machine: one record per call, moved along the table of
:mod:`._phases` from its announcement to its result's submission.

Claims and take-overs, the in-doubt policy, running under a lease, saving, batching and
posting results, and what each store or POST answer means for a call.
"""

from __future__ import annotations

import enum
import json
import logging
from typing import Any

from .._errors import (
    APIConnectionError,
    APIStatusError,
    BadRequestError,
    ConflictError,
    NotFoundError,
    RedirectError,
)
from .._retry import is_retryable_status
from ..store import (
    CallKey,
    CallRecord,
    CallState,
    Claim,
    StoreUnavailableError,
    UnknownCallError,
    arguments_hash,
)
from ..store._records import cleared_to_rerun, idempotency_key_for
from ..types import SessionEvent, TerminalTurnEvent
from ._core_base import NOT_STARTED, Call, turn_over
from ._effects import (
    Answers,
    AskInDoubt,
    Batch,
    CallSettled,
    CallStarted,
    CancelFunction,
    ClaimCall,
    Effect,
    FunctionOutcome,
    InDoubtAnswer,
    KeepLateOutcome,
    Lookup,
    LookupMany,
    LookupResult,
    MarkInDoubt,
    Outcome,
    PostOutcome,
    PostResults,
    Release,
    RenewLeases,
    RunFunction,
    SaveResult,
    StoreAnswer,
    TakeOver,
    Verdict,
    WriteMarks,
)
from ._phases import FIRST, Phase
from ._results import (
    ENDED_WITHOUT_RESULT,
    IN_DOUBT_ERROR,
    checked_failure_event,
    failure_event,
    success_event,
    timeout_error,
)
from ._serves import ServeTracker, _terminal_status
from ._types import PendingCall

__all__ = ["CallMachine", "Refusal", "classify_refusal"]

MAX_BATCH = 64

#: Longest a saved result waits for others of its Session still being decided, so that
#: they go out in one POST.
BATCH_LINGER = 0.05

#: The server may announce a call (its Item) a moment before it can accept the result;
#: such a result gets 400 "Unknown pending tool call.". Retry it this many times.
UNKNOWN_CALL_RETRIES = 8

UNKNOWN_CALL_DELAY = 0.05

#: A result the server could not take (5xx, connection errors, unrecognised 409s) is
#: posted again after this delay, doubling up to the cap. It stays saved meanwhile.
POST_RETRY_DELAY = 0.2

POST_RETRY_MAX_DELAY = 10.0

#: A claimed function starts only while at least this share of its lease is left,
#: counted from when the claim (or the last renewal) was *sent*: a claim the store
#: acknowledged late may have lapsed meanwhile, and another worker may have answered
#: the call "outcome unknown". Such a claim is renewed (which checks that it is still
#: ours) before the function starts.
START_LEASE_SHARE = 1 / 3

_UNKNOWN_CALL = "unknown pending tool call"

_DIFFERENT_RESULT = "different result"

_CANNOT_ACCEPT = "cannot accept this input"

#: The phase a call is in while each kind of store effect for it is in flight.
_ANSWERED_IN: dict[type, Phase] = {
    ClaimCall: Phase.CLAIMING,
    TakeOver: Phase.TAKING_OVER,
    MarkInDoubt: Phase.MARKING_IN_DOUBT,
    Release: Phase.RELEASING,
    Lookup: Phase.LOOKING,
    SaveResult: Phase.SAVING,
}

#: Phases the clockwork acts on (with calls that have a store retry or a deadline).
_WATCHED = frozenset({Phase.WAITING, Phase.QUEUED})
#: Saved results wait (up to ``BATCH_LINGER``) for calls of their Session in these.
_LINGER_FOR = NOT_STARTED | {Phase.WAITING, Phase.QUEUED, Phase.RUNNING, Phase.SAVING}

#: Outcomes that do not settle a call: a later announcement decides it afresh.
_REDECIDE = frozenset({Outcome.RELEASED, Outcome.ABANDONED_BY_SERVE})

#: Outcomes that leave a call to another runner: announced again, it is not this one's.
_NOT_MINE = frozenset({Outcome.LEFT_PENDING, Outcome.IN_DOUBT_ELSEWHERE})


class CallMachine(ServeTracker):
    """Every decision about one call, from its announcement to its result's submission."""

    def on_late_event(self, event: SessionEvent, now: float) -> None:
        """A stream event that came after its serve ended. Nobody follows the Session
        for that serve any more, but the pump outlives serves: a Turn's cancel still
        stops that Turn's functions running here."""
        if isinstance(event, TerminalTurnEvent) and _cancelled(event):
            self._cancel_turn(event.session_id, event.turn_id, now)

    def _calls_due(self, now: float) -> None:
        """Store effects to send again, timeouts, claims, starts and POSTs due now."""
        for call in list(self._watch.values()):
            if call.retry is not None and call.not_before <= now:
                effect, call.retry = call.retry, None
                if isinstance(effect, (ClaimCall, TakeOver)):
                    call.claim_sent_at = now
                self._effects.append(effect)
        self._time_out(now)
        self._claim_waiting(now)
        self._start_queued(now)
        self._take_batches(now)
        # Drop calls the clockwork has nothing more to do for.
        for key, call in list(self._watch.items()):
            if call.retry is None and not (
                call.phase in _WATCHED or (call.phase is Phase.RUNNING and call.deadline)
            ):
                del self._watch[key]

    def _call_wakeups(self, due: list[float]) -> None:
        """Add when each watched call next needs the clockwork to ``due``."""
        for call in self._watch.values():
            if call.retry is not None:
                due.append(call.not_before)
            elif call.phase is Phase.RUNNING and call.deadline is not None:
                due.append(call.deadline)
        for session_id, postable in self._postable.items():
            if self._view(session_id).posting:
                continue  # the POST's answer wakes the pump
            for call in postable.values():
                ready = call.ready_at + BATCH_LINGER
                due.append(call.not_before if call.phase is Phase.BACKOFF else ready)

    def _consider(self, pending: PendingCall, now: float, *, read: bool = False) -> None:
        known = self.calls.get(pending.key)
        if known is not None and known.phase is Phase.DONE and known.outcome in _REDECIDE:
            self._forget(known)
            known = None
        if known is not None:
            if known.phase is Phase.DONE and known.outcome in _NOT_MINE:
                self._view(pending.key.session_id).not_mine.add(pending.key)
            self._count(pending.key.session_id, "duplicates_skipped")
            return
        if all(serve.stopping for serve in self._serves_of(pending.key.session_id)):
            return  # stopping: leave new calls pending for the next serve
        if turn_over(self._view(pending.key.session_id), pending.key.turn_id):
            return  # a read from before the cancel: the Turn takes no result
        function = self.registry.get(pending.name)
        call = Call(pending.key, pending.name, pending.arguments, function, FIRST)
        self.calls[pending.key] = call
        view = self._view(pending.key.session_id)
        # Calls the first snapshot of the Session lists were pending before this runner
        # followed it: a crashed runner may have left them in doubt.
        call.fresh = pending.key not in view.pending or view.snapshots > 1
        view.calls[pending.key] = call
        view.unsettled.add(pending.key)
        call.known_at_read = view.reads_sent
        if not _sendable(pending.key):
            self._say(
                logging.ERROR,
                "Call %r of Session %s has ids that cannot be sent back as UTF-8 (a lone "
                "surrogate); leaving it pending. The server should never send such ids.",
                pending.key.call_id,
                pending.key.session_id,
            )
            self._leave_unknown(call, None, False)
            return
        if function is None and self.unknown_functions == "leave":
            self._emit(call, Lookup(call.key), now)
            return
        if function is None:  # unknown_functions="fail": claimed to answer, never run
            self._move(call, Phase.CLAIMING)
            self._emit(call, self._claim_effect(call), now)
            return
        if read and not self._slot_ready(call):
            # A call a Session read lists may have a result saved before a restart: look
            # it up now, rather than wait for a slot only for a claim to find it (a
            # restart with thousands saved would resubmit them a slot's worth at a time).
            self._emit(call, Lookup(call.key), now)
            return
        self._wait_for_slot(call, self._claim_effect(call), now)

    def _slot_ready(self, call: Call) -> bool:
        """Whether a claim of ``call`` sent now would find a concurrency slot free, with
        no call ahead of it in line."""
        taken = self._running + len(self._reserved) + len(self._waiting)
        return taken < self.max_concurrency and self._slot_free(call)

    def _wait_for_slot(self, call: Call, claim: ClaimCall | TakeOver, now: float) -> None:
        """Claim (or take over) ``call`` once a concurrency slot is free, not before."""
        call.claim = claim
        self._enter(call, Phase.WAITING, now)

    def _claim_waiting(self, now: float) -> None:
        """Send the claims of waiting calls, oldest first, while slots are free."""
        for call in list(self._watch.values()):
            if self._running + len(self._reserved) >= self.max_concurrency:
                return
            if call.phase is not Phase.WAITING or not self._slot_free(call):
                continue
            claim, call.claim = call.claim, None
            assert claim is not None
            if self._start_with_claim(call, claim, now):
                continue
            self._move(call, Phase.CLAIMING if isinstance(claim, ClaimCall) else Phase.TAKING_OVER)
            self._emit(call, claim, now)

    def _start_with_claim(self, call: Call, claim: ClaimCall | TakeOver, now: float) -> bool:
        """The idempotent fast path: a function that may run again after a crash anyway
        starts in the round its claim is sent, not after the claim's answer. Its outcome
        is saved and posted only once the claim is answered won; a lost claim stops it
        and drops its outcome (the winner's result is the one sent)."""
        assert call.function is not None
        if (
            not (call.function.idempotent and call.fresh and self.idempotent_fast_path)
            or call.key in self._dropped_runs  # one run of a call at a time on a worker
            # An earlier claim of ours may have committed: this one would find that
            # record, whose lease is of unknown age, so it is confirmed (and renewed)
            # before the function starts, as any claim of ours found committed is.
            or call.key in self._unconfirmed
            or not isinstance(claim, ClaimCall)
            or now < self._store_retry_at  # the claim would wait: so does the run
            # Nobody serves its Session any more (its serve ended while the call was
            # looked up): the claim's answer gives it back, and nothing may start first.
            or not self._serves_of(call.key.session_id)
        ):
            return False
        self._move(call, Phase.RUNNING)
        call.claim_unanswered = True
        call.attempts = 1  # what a first claim records
        self._emit(call, claim, now)
        self._start(call, now)
        return True

    def _slot_free(self, call: Call) -> bool:
        """Whether ``call``'s function is under its own ``max_concurrency``."""
        assert call.function is not None
        limit = call.function.max_concurrency
        if limit is None:
            return True
        kept = sum(1 for other in self._reserved.values() if other.name == call.name)
        return self._running_by_name[call.name] + kept < limit

    def _claim_effect(self, call: Call) -> ClaimCall:
        return ClaimCall(
            call.key,
            function_name=call.name,
            arguments_hash=arguments_hash(call.arguments),
            owner=self.owner,
            lease_seconds=self.lease_seconds,
        )

    def on_store_answer(self, answer: StoreAnswer, now: float) -> None:
        effect = answer.effect
        if isinstance(effect, LookupMany):
            # Each lookup is answered as if alone; a batch that failed as a whole fails
            # each of its lookups (each is retried, as it would have been alone).
            if isinstance(answer.value, Answers):
                for each in answer.value.answers:
                    self.on_store_answer(each, now)
            else:
                assert answer.error is not None
                for lookup in effect.lookups:
                    self.on_store_answer(StoreAnswer(lookup, error=answer.error), now)
            return
        if isinstance(effect, WriteMarks):
            self._on_marks_written(effect, answer.error, now)
            return
        if isinstance(effect, RenewLeases):
            self._on_renewed(answer, now)
            return
        if isinstance(effect, KeepLateOutcome):
            if answer.error is not None:
                # Best effort: the outcome is in the log already, and nothing sent or
                # to be sent depends on it, so it is not written again.
                self._say(
                    logging.WARNING,
                    "Could not keep the late outcome of call %s in the result store: %s",
                    effect.key.call_id,
                    answer.error,
                )
            return
        call = self.calls.get(effect.key)
        if call is None or not (
            call.phase is _ANSWERED_IN[type(effect)] or _answered_early(call, effect)
        ):
            if isinstance(answer.value, Claim) and answer.value.won:
                # A claim nobody here waits for any more: give it back at once.
                self._effects.append(Release(effect.key, self.owner))
            return
        if answer.error is not None:
            self._on_store_error(call, effect, answer.error, now)
            return
        self._store_ok()
        value = answer.value
        if isinstance(effect, ClaimCall) and call.claim_unanswered:
            assert isinstance(value, Claim)
            self._on_claim_of_run(call, value, now)
        elif isinstance(effect, SaveResult) and call.save_unanswered:
            assert isinstance(value, CallRecord)
            self._on_saved_after_post(call, value, now)
        elif isinstance(effect, ClaimCall):
            assert isinstance(value, Claim)
            self._on_claim(call, value, now)
        elif isinstance(effect, TakeOver):
            assert isinstance(value, Claim)
            if value.won or self._ours_unconfirmed(call, value.record):
                self._hold(call, value.record, now, won=value.won)
            else:
                self._decide_existing(call, value.record, value.stale, now)
        elif isinstance(effect, MarkInDoubt):
            self._on_marked_in_doubt(call, bool(value), now)
        elif isinstance(effect, Release):
            self._done(call, Outcome.RELEASED)
        elif isinstance(effect, Lookup):
            assert isinstance(value, LookupResult)
            self._on_lookup(call, value, now)
        elif isinstance(effect, SaveResult):
            assert isinstance(value, CallRecord)
            self._on_saved(call, value, now)

    def _on_claim(self, call: Call, claim: Claim, now: float) -> None:
        if claim.won or self._ours_unconfirmed(call, claim.record):
            self._hold(call, claim.record, now, won=claim.won)
            return
        self._decide_existing(call, claim.record, claim.stale, now)

    def _ours_unconfirmed(self, call: Call, record: CallRecord) -> bool:
        """Our own earlier claim or take-over raised but committed: the record is just
        as that write left it. The function never started (we remember every such
        write), so holding the call now runs it once, not again."""
        return (
            self._unconfirmed.get(call.key) == record.attempts
            and record.owner == self.owner
            and record.state is CallState.STARTED
            and not record.has_result()
        )

    def _hold(self, call: Call, record: CallRecord, now: float, *, won: bool) -> None:
        """The claim is ours. Its lease counts from when the claim was sent; a claim of
        ours found committed earlier (``won`` false) holds a lease of unknown age."""
        self._unconfirmed.pop(call.key, None)
        call.lease_held = True
        call.lease_until = call.claim_sent_at + self.lease_seconds if won else float("-inf")
        call.attempts = record.attempts
        if call.function is None:
            # unknown_functions="fail": the claim is ours; answer with a failure.
            error = f"No function named {call.name!r} is served here."
            self._save(call, failure_event(call.key, error), self.owner, now)
            return
        view = self._view(call.key.session_id)
        if not self._serves_of(call.key.session_id) or turn_over(view, call.key.turn_id):
            # Its serve ended, or its Turn was cancelled or ended, while the claim was on
            # its way: nobody will run it.
            self._give_back(call, now)
            return
        self._enter(call, Phase.QUEUED, now)
        if self._renew_at is None:
            self._renew_at = now + self.lease_seconds / 3

    def _decide_existing(self, call: Call, record: CallRecord, stale: bool, now: float) -> None:
        """A record exists: settle the call from what it says, never by running again
        unless it is a call in doubt whose function is idempotent or that a person
        cleared to run again (``calls resolve --rerun``)."""
        self._unconfirmed.pop(call.key, None)
        call.attempts = record.attempts
        if record.state in (CallState.APPLIED, CallState.ABANDONED):
            self._count(call.key.session_id, "duplicates_skipped")
            self._done(call, Outcome.DUPLICATE)
        elif record.state is CallState.REJECTED:
            self._rejected(call, record, now, newly=False)
        elif record.has_result():
            call.record = record
            call.found_saved = True
            self._enter(call, Phase.READY, now)
            self._count(call.key.session_id, "results_resubmitted")
        elif call.function is None:
            self._leave_unknown(call, record, stale)
        elif cleared_to_rerun(record):
            self._say(
                logging.WARNING,
                "Call %s of %s in Session %s was cleared to run again by hand; running it",
                call.key.call_id,
                call.name,
                call.key.session_id,
            )
            self._wait_for_slot(
                call, TakeOver(call.key, self.owner, self.lease_seconds, record.attempts), now
            )
        elif record.state is CallState.IN_DOUBT:
            self._in_doubt(call, record.attempts, now)
        elif stale or record.owner == self.owner:
            # Nobody can be trusted to finish it (lease expired, owner gone, or this
            # process's own claim that nothing here runs): it may have run.
            self._move(call, Phase.MARKING_IN_DOUBT)
            self._emit(call, MarkInDoubt(call.key, self.owner, record.attempts), now)
        else:
            # Another worker holds a live claim: read the Session again later.
            self._count(call.key.session_id, "duplicates_skipped")
            self._forget(call)

    def _on_lookup(self, call: Call, found: LookupResult, now: float) -> None:
        record = found.record
        if record is None:
            if call.function is None:
                self._leave_unknown(call, None, False)
            else:  # never claimed, or its record vanished: claim it
                call.fresh = True
                self._wait_for_slot(call, self._claim_effect(call), now)
            return
        if call.function is not None and self._ours_unconfirmed(call, record):
            # Our claim committed though its answer was lost: claiming again holds it.
            self._wait_for_slot(call, self._claim_effect(call), now)
            return
        self._decide_existing(call, record, found.stale, now)

    def _leave_unknown(self, call: Call, record: CallRecord | None, stale: bool) -> None:
        """A call to a function this runner does not serve (or whose ids no result could
        name): left for a runner that does.

        A result someone saved was resubmitted above (that is how ``openagentcore
        recover`` settles a Session without the application's code).
        """
        view = self._view(call.key.session_id)
        view.not_mine.add(call.key)
        report_to = "left_pending"
        if record is not None and (record.state is CallState.IN_DOUBT or stale):
            # A call cleared to run again by hand waits for a runner that serves it.
            report_to = "left_pending" if cleared_to_rerun(record) else "in_doubt"
        self._report_key(call.key.session_id, report_to, call.key)
        self._done(
            call,
            Outcome.LEFT_PENDING if report_to == "left_pending" else Outcome.IN_DOUBT_ELSEWHERE,
        )

    def _on_marked_in_doubt(self, call: Call, changed: bool, now: float) -> None:
        # Ours or not, a call marked in doubt is settled by the in-doubt policy at
        # once, as a restarted runner would: the Turn must not wait on it.
        call.lease_held = False
        if not changed:
            # Someone moved it first (took it over, saved a result): look again.
            self._move(call, Phase.LOOKING)
            self._emit(call, Lookup(call.key), now)
            return
        self._in_doubt(call, call.attempts, now)

    def _in_doubt(self, call: Call, attempts: int, now: float) -> None:
        """A call that started and left no result: decide without running it blindly."""
        self._report_key(call.key.session_id, "in_doubt", call.key)
        function = call.function
        assert function is not None
        if function.idempotent:
            self._decided(
                call, attempts, InDoubtAnswer(call.key, Verdict.RERUN), now
            )  # capped there
        elif self.in_doubt_hook:
            self._move(call, Phase.DECIDING)
            self._effects.append(AskInDoubt(call.key, call.name, call.arguments, attempts))
        else:
            self._decided(call, attempts, InDoubtAnswer(call.key, Verdict.FAIL), now)

    def on_in_doubt_answer(self, answer: InDoubtAnswer, now: float) -> None:
        """The ``on_in_doubt`` hook decided (a hook that raised decides ``fail``)."""
        call = self.calls.get(answer.key)
        if call is None or call.phase is not Phase.DECIDING:
            return
        self._decided(call, call.attempts, answer, now)

    def _decided(self, call: Call, attempts: int, answer: InDoubtAnswer, now: float) -> None:
        function = call.function
        if (
            answer.kind is Verdict.RERUN
            and function is not None
            and attempts >= function.max_attempts
        ):
            # ``max_attempts`` caps every run, whoever asks for another: a function that
            # kills its worker each time must not loop, whatever the hook answers.
            self._say(
                logging.WARNING,
                "Call %s of %s in Session %s was run %d times (max_attempts=%d); not "
                "running it again as asked, failing it as outcome unknown",
                call.key.call_id,
                call.name,
                call.key.session_id,
                attempts,
                function.max_attempts,
            )
            answer = InDoubtAnswer(call.key, Verdict.FAIL)
        self._say(
            logging.WARNING,
            "Call %s of %s in Session %s is in doubt (started, no saved result); resolving with %s",
            call.key.call_id,
            call.name,
            call.key.session_id,
            answer.kind.value,
        )
        if answer.kind is Verdict.RERUN:
            self._wait_for_slot(
                call, TakeOver(call.key, self.owner, self.lease_seconds, attempts), now
            )
            return
        event: dict[str, Any]
        if answer.kind is Verdict.RESULT:
            try:
                event = success_event(call.key, answer.value)
            except (TypeError, ValueError):
                self._say(
                    logging.ERROR, "on_in_doubt's result for %s cannot be sent", call.key.call_id
                )
                event = failure_event(call.key, IN_DOUBT_ERROR)
        else:
            try:
                event = checked_failure_event(call.key, answer.error or IN_DOUBT_ERROR)
            except ValueError:
                self._say(
                    logging.ERROR,
                    "on_in_doubt's error text for %s cannot be sent",
                    call.key.call_id,
                )
                event = failure_event(call.key, IN_DOUBT_ERROR)
        self._save(call, event, None, now)

    def _start_queued(self, now: float) -> None:
        """Start the claimed calls (each keeps a slot) whose lease is surely still
        theirs; the others are confirmed by a renewal first."""
        for call in list(self._watch.values()):
            if call.phase is not Phase.QUEUED or call.function is None:
                continue
            if call.key in self._dropped_runs:
                continue  # a dropped run of it still runs: one run of a call at a time
            if call.lease_until - now < self.lease_seconds * START_LEASE_SHARE:
                due = max(now, self._renew_retry_at)
                if self._renew_at is None or self._renew_at > due:
                    self._renew_at = due
                continue
            self._move(call, Phase.RUNNING)
            self._start(call, now)

    def _start(self, call: Call, now: float) -> None:
        """Run ``call``'s function (the call is ``RUNNING``)."""
        assert call.function is not None
        self._running += 1
        self._running_by_name[call.name] += 1
        timeout = call.function.timeout
        call.deadline = None if timeout is None else now + timeout
        self._effects.append(
            RunFunction(call.key, call.function, call.arguments, call.attempts, call.deadline)
        )
        self._notes.append(CallStarted(call.key, call.name, call.attempts))

    def _time_out(self, now: float) -> None:
        """Fail calls whose function runs past its ``timeout``. The function is asked to
        stop; whatever it returns later changes nothing sent (it is logged, and kept in
        the store beside the record for the operator)."""
        for call in list(self._watch.values()):
            if call.phase is not Phase.RUNNING or call.deadline is None or call.deadline > now:
                continue
            function = call.function
            assert function is not None
            assert function.timeout is not None
            self._say(
                logging.WARNING,
                "Call %s of %s timed out after %g s",
                call.key.call_id,
                call.name,
                function.timeout,
            )
            self._effects.append(CancelFunction(call.key))
            self._overrunning[call.key] = call.name
            if call.claim_unanswered:
                self._unclaimed_overruns.add(call.key)
            self._count(call.key.session_id, "calls_run")
            self._count(call.key.session_id, "function_errors")
            error = timeout_error(function.timeout, idempotent=function.idempotent)
            self._finish_run(call, failure_event(call.key, error), False, now)

    def on_function_done(self, outcome: FunctionOutcome, now: float) -> None:
        if outcome.key in self._dropped_runs:
            name, counted = self._dropped_runs.pop(outcome.key)
            self._running_by_name[name] -= 1
            self._running -= 1
            if not counted and outcome.event is not None:
                self._count_run(outcome.key.session_id, outcome.event, outcome.ran)
            return
        call = self.calls.get(outcome.key)
        if (
            call is not None
            and call.phase is Phase.RUNNING
            and call.deadline is not None
            and call.deadline <= now
        ):
            # Its time ran out before its outcome came in (the timekeeper had not
            # looked yet): the timeout decides, and this outcome is kept as late.
            self._time_out(now)
        if outcome.key in self._overrunning:
            self._running_by_name[self._overrunning.pop(outcome.key)] -= 1
            self._running -= 1
            if outcome.key in self._unclaimed_overruns:
                # Its claim was not answered when it timed out, and it may be lost yet,
                # or the call settled without it (forgotten since): nothing of a run
                # whose claim was never won is kept.
                self._unclaimed_overruns.discard(outcome.key)
                return
            late = outcome.event
            if late is None:
                late = failure_event(outcome.key, ENDED_WITHOUT_RESULT)
            self._say(
                logging.WARNING,
                "Call %s finished after its timeout; its late outcome was not sent, and is "
                "kept in the result store: %s",
                outcome.key.call_id,
                late,
            )
            self._effects.append(KeepLateOutcome(outcome.key, late))
            return
        call = self.calls.get(outcome.key)
        if call is None or call.phase is not Phase.RUNNING:
            return
        self._running -= 1
        self._running_by_name[call.name] -= 1
        if outcome.event is not None:
            self._count_run(call.key.session_id, outcome.event, outcome.ran)
        self._finish_run(call, outcome.event, outcome.ran, now)

    def _count_run(self, session_id: str, event: dict[str, Any], ran: bool) -> None:
        if ran:
            self._count(session_id, "calls_run")
        if event.get("success") is False:
            self._count(session_id, "function_errors")

    def _finish_run(self, call: Call, event: dict[str, Any] | None, ran: bool, now: float) -> None:
        """Save (and for an idempotent function, post) what a run gave: ``event``, or
        ``None`` when it ended without a result; ``ran`` when the function was called."""
        if call.claim_unanswered:
            # Started as its claim was sent: the claim's answer decides what becomes
            # of the outcome (saved and posted if won, dropped if lost).
            call.parked = (event, ran)
            self._move(call, Phase.CLAIMING)
            return
        if event is None:
            # It ended without a result (SystemExit or the like): it may have had its
            # effect. Keep the lease until the store says "in doubt".
            self._move(call, Phase.MARKING_IN_DOUBT)
            self._emit(call, MarkInDoubt(call.key, self.owner, call.attempts), now)
            return
        assert call.function is not None
        if call.function.idempotent and self.idempotent_fast_path:
            self._save_and_post(call, event, ran, now)
            return
        self._save(call, event, self.owner, now)
        call.run_result = ran

    def _save_and_post(self, call: Call, event: dict[str, Any], ran: bool, now: float) -> None:
        """An idempotent function's result is posted without waiting for its save: the
        save and the POST go out in the same round. A crash between them leaves the
        call started without a result, which a restarted runner may run again (the
        function allows it); until the save is answered, no progress mark is written.
        The POST reads only the result and its key from the record built here."""
        call.event = event
        call.run_result = ran
        call.save_unanswered = True
        self._saving_posted.add(call.key)
        call.record = CallRecord(
            key=call.key,
            function_name=call.name,
            arguments_hash="",
            state=CallState.COMPLETED,
            result=event,
            idempotency_key=idempotency_key_for(call.key),
            attempts=call.attempts,
            owner=self.owner,
            lease_expires_at=None,
            created_at=0.0,
            updated_at=0.0,
        )
        self._emit(call, SaveResult(call.key, event, self.owner), now)
        self._enter(call, Phase.READY, now)

    def _on_claim_of_run(self, call: Call, claim: Claim, now: float) -> None:
        """The answer to the claim of a run started with it (``_start_with_claim``)."""
        call.claim_unanswered = False
        if claim.won or self._ours_unconfirmed(call, claim.record):
            self._unclaimed_overruns.discard(call.key)
            self._unconfirmed.pop(call.key, None)
            call.lease_held = True
            won = claim.won
            call.lease_until = call.claim_sent_at + self.lease_seconds if won else float("-inf")
            call.attempts = claim.record.attempts
            if self._renew_at is None:
                self._renew_at = now + self.lease_seconds / 3
            if call.parked is not None:
                (event, ran), call.parked = call.parked, None
                self._finish_run(call, event, ran, now)
            return
        self._drop_run(call)
        self._decide_existing(call, claim.record, claim.stale, now)

    def _drop_run(self, call: Call) -> None:
        """The claim of a run started with it lost (another worker holds the call) or
        was refused: the function is asked to stop, and whatever it gives is dropped,
        never posted by this runner. It keeps its slot until it returns."""
        call.claim_unanswered = False
        call.parked = None
        if call.key in self._overrunning:  # timed out, counted: its late outcome is dropped
            self._dropped_runs[call.key] = (self._overrunning.pop(call.key), True)
        elif call.phase is Phase.RUNNING:
            self._effects.append(CancelFunction(call.key))
            self._dropped_runs[call.key] = (call.name, False)
            self._move(call, Phase.CLAIMING)
        self._say(
            logging.INFO,
            "Call %s of %s started as it was claimed, and the claim was not ours; its "
            "run is stopped and its outcome dropped",
            call.key.call_id,
            call.name,
        )

    def _on_saved_after_post(self, call: Call, record: CallRecord, now: float) -> None:
        """The save of a result posted as it was saved (``_save_and_post``)."""
        call.save_unanswered = False
        self._saving_posted.discard(call.key)
        self._touched[call.key.session_id] = None  # its serves waited for this save
        call.lease_held = False
        attempted, call.event = call.event, None
        mark, call.mark_after_save = call.mark_after_save, None
        if attempted is not None and _same_result(record, attempted):
            if mark is not None:
                self._queue_mark(call.key, mark, now)
            return
        # The record is not what was posted, so no progress mark of this runner's fits
        # it. The posted result is never swapped for the saved one: two different
        # results for one call would go out from this runner.
        call.recorded = False
        if not record.has_result():
            self._say(
                logging.WARNING,
                "Call %s of %s in Session %s was settled (%s) while its result was posted; "
                "the posted result is not saved",
                call.key.call_id,
                call.name,
                call.key.session_id,
                record.state.value,
            )
            return
        if call.run_result and attempted is not None:
            self._effects.append(KeepLateOutcome(call.key, attempted))
        self._say(
            logging.WARNING,
            "Call %s of %s in Session %s: its result was posted as it was saved, and "
            "another result was saved first (another worker ran it again, or it was "
            "answered by hand). The server keeps whichever reached it first and refuses "
            "the other as a conflict; this runner's result is kept beside the record as "
            "its late outcome. Compare them with `openagentcore calls show %s`.",
            call.key.call_id,
            call.name,
            call.key.session_id,
            call.key.call_id,
        )

    def _marks_outstanding(self, session_id: str) -> bool:
        return super()._marks_outstanding(session_id) or any(
            key.session_id == session_id for key in self._saving_posted
        )

    def _queue_mark(self, key: CallKey, to: CallState, now: float) -> None:
        call = self.calls.get(key)
        if call is not None and call.save_unanswered:
            call.mark_after_save = to  # a mark needs the saved result: written after it
            return
        super()._queue_mark(key, to, now)

    def _save(self, call: Call, event: dict[str, Any], owner: str | None, now: float) -> None:
        self._move(call, Phase.SAVING)
        call.event = event
        call.run_result = False
        self._emit(call, SaveResult(call.key, event, owner), now)

    def _on_saved(self, call: Call, record: CallRecord, now: float) -> None:
        call.lease_held = False
        attempted, call.event = call.event, None
        ours = attempted is not None and _same_result(record, attempted)
        if call.run_result and attempted is not None and not ours:
            self._lost_race(call, attempted, record)
        if not record.has_result():
            if cleared_to_rerun(record):
                # A person cleared it to run again before the policy's answer landed.
                self._decide_existing(call, record, False, now)
                return
            # The call was settled meanwhile (abandoned); nothing to post.
            self._done(call, Outcome.DUPLICATE)
            return
        if record.state is CallState.REJECTED:
            self._rejected(call, record, now, newly=False)
            return
        call.record = record
        call.found_saved = not ours
        self._enter(call, Phase.READY, now)

    def _lost_race(self, call: Call, outcome: dict[str, Any], record: CallRecord) -> None:
        """The function finished, but another worker's verdict on its call (marked in
        doubt and answered, or settled) was saved first: the first saved result is what
        the model gets. The function's own is kept beside it, as after a timeout."""
        self._say(
            logging.WARNING,
            "Call %s of %s in Session %s finished, but another worker had settled it "
            "first (%s); its result was not sent, and is kept in the result store as its "
            "late outcome: %s",
            call.key.call_id,
            call.name,
            call.key.session_id,
            record.settled_by or record.state.value,
            outcome,
        )
        self._effects.append(KeepLateOutcome(call.key, outcome))

    def _take_batches(self, now: float) -> None:
        for session_id, postable in list(self._postable.items()):
            view = self._view(session_id)
            if view.posting and not view.cancelled_turns:
                continue  # nothing to send yet, nor to drop unsent
            calls = [
                call
                for call in list(postable.values())
                if (call.phase is Phase.READY or call.not_before <= now)
                and not self._cancelled_unsent(call, now)
            ]
            if not calls or view.posting or self._lingering(session_id, calls, now):
                continue
            chunks = [[call] for call in calls if call.alone]
            together = [call for call in calls if not call.alone]
            chunks += [together[i : i + MAX_BATCH] for i in range(0, len(together), MAX_BATCH)]
            for chunk in chunks:
                for call in chunk:
                    self._move(call, Phase.POSTING)
                records = tuple(call.record for call in chunk if call.record is not None)
                self._effects.append(PostResults(Batch(session_id, records)))
                self._view(session_id).posting += 1

    def _cancelled_unsent(self, call: Call, now: float) -> bool:
        """A saved result of a Turn known cancelled, never sent (or only refused as too
        early): the Turn takes no result any more, so it is not posted, only to be
        refused with a 409. It stays saved; the record is marked ``abandoned``, as a
        refused one would be: nothing is left to do for it. A result that may have reached
        the server (an earlier POST of it failed, or someone else saved it and may have
        posted it) is posted again instead: the server takes an identical result again,
        or refuses one it never stored, and only it can say which."""
        view = self._view(call.key.session_id)
        if call.key.turn_id not in view.cancelled_turns or call.post_failures or call.found_saved:
            return False
        self._say(
            logging.INFO,
            "Call %s: its Turn %s was cancelled, so its saved result is kept but not submitted",
            call.key.call_id,
            call.key.turn_id,
        )
        self._report_key(call.key.session_id, "abandoned", call.key)
        self._queue_mark(call.key, CallState.ABANDONED, now)
        self._done(call, Outcome.ABANDONED)
        return True

    def _lingering(self, session_id: str, ready: list[Call], now: float) -> bool:
        """Whether to hold a Session's saved results a moment: other calls of the Session
        are still being decided or run, and posting them together is one request instead
        of many (a restart resubmits a whole Session's results in one POST; parallel calls
        that end together go in one). The Turn needs every result before it goes on, so
        the first ones lose nothing by waiting for the last."""
        oldest = min(call.ready_at for call in ready)
        if now >= oldest + BATCH_LINGER:
            return False
        return any(call.phase in _LINGER_FOR for call in self._view(session_id).calls.values())

    def on_posted(self, outcome: PostOutcome, now: float) -> None:
        self._touched[outcome.batch.session_id] = None
        view = self._sessions.get(outcome.batch.session_id)
        if view is not None and view.posting:
            view.posting -= 1
        calls = [self.calls.get(record.key) for record in outcome.batch.records]
        mine = [call for call in calls if call is not None and call.phase is Phase.POSTING]
        error = outcome.error
        if error is None:
            if view is not None:
                view.unreachable_since = None
            for call in mine:
                self._notes.append(CallSettled(call.key, call.name, Outcome.SUBMITTED))
                self._move(call, Phase.POSTED)
                self._count(call.key.session_id, "results_submitted")
                if call.output_seen:
                    self._queue_mark(call.key, CallState.APPLIED, now)
                    self._done(call, Outcome.APPLIED)
                else:
                    self._queue_mark(call.key, CallState.SUBMITTED, now)
            return
        if isinstance(error, NotFoundError):
            # This POST's calls end with the Session; another POST in flight may still
            # bring a 202 (sent before the Session went), so its calls wait for it.
            for call in mine:
                self._done(call, Outcome.SESSION_GONE)
            self._session_gone(outcome.batch.session_id, error)
            return
        kind = classify_refusal(error)
        if kind in (Refusal.RETRY_LATER, Refusal.NO_ACCESS) and view is not None:
            self._server_failing(view, error, now)
        if kind is Refusal.NO_ACCESS:
            kind = Refusal.RETRY_LATER  # the result stays saved, for when the key or URL is fixed
        if len(mine) > 1 and kind is not Refusal.RETRY_LATER:
            # One bad result refuses the whole atomic batch: find it by sending each alone.
            for call in mine:
                self._enter(call, Phase.READY, now)
                call.alone = True
            return
        for call in mine:
            self._on_refused(call, kind, error, now)

    def _on_refused(self, call: Call, kind: Refusal, error: Exception, now: float) -> None:
        if kind is Refusal.RETRY_SOON and call.unknown_call_tries < UNKNOWN_CALL_RETRIES:
            self._enter(call, Phase.BACKOFF, now)
            call.not_before = now + UNKNOWN_CALL_DELAY * 2**call.unknown_call_tries
            call.unknown_call_tries += 1
            return
        if kind is Refusal.RETRY_LATER:
            # The server did not answer usefully even after the client's retries. The
            # result stays saved; it is posted again, later and later.
            delay = min(POST_RETRY_MAX_DELAY, POST_RETRY_DELAY * 2 ** min(call.post_failures, 16))
            call.post_failures += 1
            self._enter(call, Phase.BACKOFF, now)
            call.not_before = now + delay
            self._say(
                logging.WARNING,
                "Could not submit the result of call %s (%s); retrying in %.1f s",
                call.key.call_id,
                error,
                delay,
            )
            return
        if kind is Refusal.CONFLICT:
            # The server holds another result for this call. Never overwrite it.
            self._report_key(call.key.session_id, "conflicts", call.key)
            self._say(
                logging.ERROR,
                "Call %s already has a different result on the server; the saved one was "
                "not applied. Inspect it with `openagentcore calls show`.",
                call.key.call_id,
            )
            self._queue_mark(call.key, CallState.ABANDONED, now)
            self._done(call, Outcome.CONFLICT)
        elif kind is Refusal.ABANDONED:
            self._report_key(call.key.session_id, "abandoned", call.key)
            self._queue_mark(call.key, CallState.ABANDONED, now)
            self._done(call, Outcome.ABANDONED)
        else:
            self._say(
                logging.ERROR,
                "The server refused the result for call %s: %s. The call stays pending; "
                "inspect it with `openagentcore calls show %s` and answer it with "
                "`openagentcore calls resolve %s --failed MESSAGE` (or --output TEXT).",
                call.key.call_id,
                error,
                call.key.call_id,
                call.key.call_id,
            )
            assert call.record is not None
            self._rejected(call, call.record, now, newly=True)

    def _rejected(self, call: Call, record: CallRecord, now: float, *, newly: bool) -> None:
        """A result the server refused: never re-run, never pruned, reported each time."""
        self._report_key(call.key.session_id, "rejected", call.key)
        view = self._view(call.key.session_id)
        view.not_mine.add(call.key)
        view.refused.setdefault(call.key, view.snapshots)
        self._want_read(view, now)  # does the Turn still wait on it?
        if newly:
            self._queue_mark(call.key, CallState.REJECTED, now)
        self._done(call, Outcome.REJECTED)

    def _on_store_error(self, call: Call, effect: Effect, error: Exception, now: float) -> None:
        if isinstance(error, UnknownCallError) and isinstance(effect, (MarkInDoubt, TakeOver)):
            # The record vanished: its worker gave back a claim it never ran. Nobody
            # holds the call now, so read it again (and claim it afresh).
            call.lease_held = False
            self._move(call, Phase.LOOKING)
            self._emit(call, Lookup(call.key), now)
            return
        if not isinstance(error, StoreUnavailableError):
            self._on_store_refused(call, effect, error, now)
            return
        self._store_failed(f"{type(effect).__name__} of call {call.key.call_id} ({error})", now)
        if isinstance(effect, TakeOver):
            # It may have committed: the retry would then find the record ours.
            self._unconfirmed[call.key] = effect.expected_attempts + 1
        if isinstance(effect, ClaimCall):
            # The claim may have committed. Remember it, forget the call, and let a
            # later read of the Session decide it again once the store is back.
            self._unconfirmed[call.key] = 1
            if call.claim_unanswered:
                # A run started with it: the claim is sent again once the store may be
                # back, and the run's outcome waits for its answer (never posted before).
                # A call waiting to be sent again may let a recover pass return: its
                # Session's serves are judged again.
                call.retry = effect
                call.not_before = self._store_retry_at
                self._watch[call.key] = call
                self._touched[call.key.session_id] = None
                return
            self._forget(call)
            view = self._view(call.key.session_id)
            # A monotonic clock may read below zero: never default the earlier time to 0.0.
            retry_at = self._store_retry_at
            view.read_at = retry_at if view.read_at is None else max(view.read_at, retry_at)
            return
        call.retry = effect
        call.not_before = self._store_retry_at
        self._watch[call.key] = call
        self._touched[call.key.session_id] = None

    def _on_store_refused(self, call: Call, effect: Effect, error: Exception, now: float) -> None:
        """A permanent store error (data the store cannot hold): the model gets a failed
        result, posted without a record, since it can never be saved."""
        self._say(
            logging.ERROR,
            "The result store refused %s of call %s: %s",
            type(effect).__name__,
            call.key.call_id,
            error,
        )
        if isinstance(effect, SaveResult) and call.save_unanswered:
            # Posted already: never swapped for a failure. It stays unsaved, unmarked.
            call.save_unanswered = False
            self._saving_posted.discard(call.key)
            self._touched[call.key.session_id] = None  # its serves waited for this save
            call.mark_after_save = None
            call.event = None
            call.recorded = False
            return
        if call.claim_unanswered:
            self._drop_run(call)
        if isinstance(effect, SaveResult) and effect.event.get("success") is not False:
            failure = failure_event(call.key, "The function's result could not be recorded.")
            self._save(call, failure, effect.owner, now)
            return
        if call.function is None and self.unknown_functions == "leave":
            self._leave_unknown(call, None, False)  # not ours to answer, even with a failure
            return
        call.lease_held = False
        call.recorded = False
        call.record = CallRecord(
            key=call.key,
            function_name=call.name,
            arguments_hash="",
            state=CallState.COMPLETED,
            result=failure_event(call.key, "This call cannot be recorded by the runner."),
            idempotency_key=idempotency_key_for(call.key),
            attempts=max(call.attempts, 1),
            owner=self.owner,
            lease_expires_at=None,
            created_at=0.0,
            updated_at=0.0,
        )
        self._enter(call, Phase.READY, now)


class Refusal(str, enum.Enum):
    """What a failed POST of results means for each result in it."""

    #: The call is not pending yet (the server announced it a moment early).
    RETRY_SOON = "retry_soon"
    #: Nothing useful was said (5xx, connection errors, unrecognised 409s): later.
    RETRY_LATER = "retry_later"
    #: The key or the URL is refused, not this result: later, once they are fixed.
    NO_ACCESS = "no_access"
    #: The server holds another result for the call.
    CONFLICT = "conflict"
    #: The Turn cannot take the result any more.
    ABANDONED = "abandoned"
    #: The server refused this result.
    REJECTED = "rejected"


def classify_refusal(error: Exception) -> Refusal:
    """What a failed POST of results means (see :class:`Refusal`).

    409s are told apart by ``code`` first; the message is only a fallback for servers
    that answer ``conflict_error`` for everything, as the contract's own table does.
    """
    if isinstance(error, BadRequestError) and _UNKNOWN_CALL in _message(error):
        return Refusal.RETRY_SOON
    if isinstance(error, APIConnectionError):
        return Refusal.RETRY_LATER
    if isinstance(error, ConflictError):
        code = getattr(error, "code", None)
        message = _message(error)
        if code == "idempotency_conflict" or error.is_idempotency_conflict:
            return Refusal.CONFLICT
        if code == "turn_conflict":
            return Refusal.ABANDONED
        if _DIFFERENT_RESULT in message:
            return Refusal.CONFLICT
        if _CANNOT_ACCEPT in message:
            return Refusal.ABANDONED
        return Refusal.RETRY_LATER  # e.g. earlier input still pending: it passes
    if isinstance(error, RedirectError) or (
        isinstance(error, APIStatusError) and error.status_code in (401, 403)
    ):
        return Refusal.NO_ACCESS  # about the key or the URL, not this result
    if isinstance(error, APIStatusError):
        return Refusal.RETRY_LATER if is_retryable_status(error.status_code) else Refusal.REJECTED
    return Refusal.RETRY_LATER


def _message(error: Exception) -> str:
    return str(getattr(error, "message", error)).lower()


def _cancelled(event: TerminalTurnEvent) -> bool:
    turn = getattr(event, "turn", None)
    return (getattr(turn, "status", None) or _terminal_status(event)) == "cancelled"


def _answered_early(call: Call, effect: Effect) -> bool:
    """Answers the idempotent fast path takes in another phase than the effect's own:
    its claim's while its function runs, its save's while its result is posted."""
    if isinstance(effect, ClaimCall):
        return call.claim_unanswered
    return isinstance(effect, SaveResult) and call.save_unanswered


def _same_result(record: CallRecord, event: dict[str, Any]) -> bool:
    """Whether ``record`` holds ``event`` (as saved: the store keeps its JSON)."""
    if record.result == event:
        return True
    return record.result is not None and json.dumps(record.result, sort_keys=True) == json.dumps(
        event, sort_keys=True
    )


def _sendable(key: CallKey) -> bool:
    """Whether a result naming ``key`` can be sent: JSON goes out as UTF-8."""
    try:
        "".join((key.session_id, key.turn_id, key.call_id)).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
