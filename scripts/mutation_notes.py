"""Why each mutant the simulator lets survive survives: equivalent, or a gap in the tests.

``scripts/mutation.py --markdown`` asks :func:`classify` about every survivor. The notes
are written by reading each survivor against the code (docs/mutation.md explains the
classes); rules that hold for whole kinds of mutant come first, then notes per function,
then notes per mutant, which win over both.
"""

# ruff: noqa: E501 (notes name mutants by the source lines they change, quoted verbatim)

from __future__ import annotations

import ast
import functools
import re

EQUIVALENT = "equivalent"
GAP = "gap"

# What the simulator does not look at, named once and cited by the notes below.
REPORT = (
    "[report] a ServeReport's lists are checked against the server and the store, its "
    "counts only as bounds (at most what its worker ran or the server took; no fault "
    "counted after the faults end): an exact count is not"
)
MARKS = (
    "[marks] a false mark is caught, and a mark the fault-free worker leaves out; a chaos "
    "worker may skip or lose marks (bookkeeping, docs/runner.md), so a mark written later "
    "or not at all there passes"
)
TIMING = "[timing] no check counts requests or measures delays, beyond the failing-server rate"
HOOK = (
    "[hook] the in-doubt answer saved is checked against its runner's hook (it answers, "
    "fails in its own words, asks to rerun or raises), and what it is asked (function, "
    "arguments, attempts) against the server and the store"
)
#: An argument of a note the core leaves for the log (``self._say``): the world checks
#: the notes about calls, not the log's.
SAY = (
    "[say] changes only a value the core logs (self._say): the simulator checks that each "
    "log note can be logged (a standard level, arguments that format) and names no None, "
    "not what it says"
)
UNKNOWN = (
    "[unknown] a chaos worker lacks a function (and leaves or fails its calls) in a "
    "fifth of the histories; these 37 seeds do not meet this case"
)
TURN = (
    "[run_turn] what run_turn returns is checked (Turn, status, text), not how: it "
    "falls back to reading what the stream showed, and requests are not counted"
)
MEMORY = "[memory] no check that the core forgets what it no longer needs"
STOP = (
    "[stop] workers call stop() and stop(force=True) while serves run, and a forced stop "
    "must tell running functions (ctx.cancelled); nothing checks that a stopped serve "
    "returns: that check finds a defect (docs/mutation.md) and waits for its fix"
)
STAMPS = "[timestamps] a record's times are checked as each change lands (tests/sim/_audit.py)"
SQL = (
    "[fields] the memory store keeps records as the SQL stores' rows, and every change is "
    "audited as it lands (tests/sim/_audit.py); what survives changes a field in a way "
    "no promise names, or in a change these seeds do not make"
)
DAMAGED = "no damaged row (changed by hand) in the simulated store: tests/store covers them"
ODD_LATE = "no late outcome holds what JSON cannot (NaN, lone surrogates, deep nesting, objects)"
LIVENESS = (
    "[liveness] the final, fault-free worker settles whatever a worker left: no check "
    "that a live worker settles what it could itself"
)
DEFENSE = (
    "[defense] the store refuses what the core never asks for (a live claim of another "
    "worker, a call with a result): the audit checks what a change did, and a refusal "
    "the core never needs changes nothing it could see"
)
NOTES_ = (
    "[notes] the notes for logs, traces and metrics are checked for truth each round "
    "(World.check_notes), not for completeness: a note left out passes"
)

_KEY_UNREAD = "the answer's key is never read: _decided uses the call's"
_ANY_KIND_FAILS = "_decided fails the call for any kind but rerun and result"
_LATE = (
    "no check that a timed-out call whose function ended later kept its late outcome "
    "(the late-outcome check judges only outcomes that were kept)"
)
_OUTCOME_UNREAD = (
    "a posted call's outcome is read only to redecide released or abandoned calls, and "
    "no note is made for a posted call"
)
_ANY_REPORT = (
    REPORT + ": a result refused for a passing reason is reported rejected (or a "
    "conflict as rejected), and the final check accepts any report of a pending call"
)
_POST_RECORD = (
    "the record _save_and_post builds is read only for its result and idempotency key "
    "(the Batch it is posted in) and handed to _rejected, which never reads its record; "
    "the store's own record replaces it when the save is answered"
)
_ENDED_BY_READ = (
    "a Turn found over only by a read while calls of it wait unanswered (its cancel "
    "event lost): the control _cancels_read_from_the_session_ignored is first caught at "
    "seed 134, not among these 37 seeds"
)
_RARE_BY_HAND = (
    "a result given by hand for a call in doubt is rare in these 37 seeds (the world "
    "checks it stands, when one is given)"
)
_PER_NAME = (
    "per-function max_concurrency is simulated and checked (no function runs beyond its "
    "limit on a worker), but these 37 seeds meet no limit together with a run that "
    "outlives its timeout"
)

#: Per mutant, the class and the one-line reason. A mutant is named by what it changes
#: (its function, and the first line it changes before and after), not by its number:
#: mutmut numbers a function's mutants afresh whenever the function changes, and a note
#: on a number would silently move to another mutant.
MUTANT_NOTES: dict[tuple[str, str, str], tuple[str, str]] = {
    # RunnerCore.__init__
    (
        "xǁRunnerCoreǁ__init__",
        "self.unknown_functions = unknown_functions",
        "self.unknown_functions = None",
    ): (GAP, UNKNOWN),
    ("xǁRunnerCoreǁ__init__", "self.in_doubt_hook = in_doubt_hook", "self.in_doubt_hook = None"): (
        GAP,
        HOOK,
    ),
    (
        "xǁRunnerCoreǁ__init__",
        "self.unreachable_timeout = unreachable_timeout",
        "self.unreachable_timeout = None",
    ): (
        GAP,
        "no outage of refused connections (APIConnectionError) long enough for a serve "
        "with a deadline-less unreachable_timeout to give up",
    ),
    ("xǁRunnerCoreǁ__init__", "self._last_serve_id = 0", "self._last_serve_id = 1"): (
        EQUIVALENT,
        "serve ids only need to be unique and rising",
    ),
    ("xǁRunnerCoreǁ__init__", "self._notes: list[Note] = []", "self._notes: list[Note] = None"): (
        GAP,
        NOTES_,
    ),
    ("xǁRunnerCoreǁ__init__", "self._marks_due = 0.0", "self._marks_due = None"): (
        EQUIVALENT,
        "_marks_due is always set by the first queued mark before anything reads it",
    ),
    ("xǁRunnerCoreǁ__init__", "self._marks_writing = False", "self._marks_writing = None"): (
        EQUIVALENT,
        "None is as false as False here",
    ),
    ("xǁRunnerCoreǁ__init__", "self._marks_failed = False", "self._marks_failed = None"): (
        EQUIVALENT,
        "None is as false as False here",
    ),
    ("xǁRunnerCoreǁ__init__", "self._renewing = False", "self._renewing = True"): (
        GAP,
        "leases never renewed: no seed runs a function longer than the lease with the "
        "store up (the lease invariant would then fire)",
    ),
    ("xǁRunnerCoreǁ__init__", "self._store_failures = 0", "self._store_failures = 1"): (
        GAP,
        TIMING + " (first store retry 0.2 s, not 0.1 s)",
    ),
    (
        "xǁRunnerCoreǁ__init__",
        'self._store_retry_at = float("-inf")  # monotonic clocks may start anywhere',
        'self._store_retry_at = float("-INF")  # monotonic clocks may start anywhere',
    ): (EQUIVALENT, 'float() reads "-INF" as "-inf"'),
    (
        "xǁRunnerCoreǁstop",
        "def stop(self, last_serve: int, *, force: bool = False) -> None:",
        "def stop(self, last_serve: int, *, force: bool = True) -> None:",
    ): (
        EQUIVALENT,
        "the default is never used: the pump, stop()'s only caller, always passes force",
    ),
    ("xǁRunnerCoreǁattach", "self._last_serve_id += 1", "self._last_serve_id -= 1"): (
        GAP,
        STOP + " (falling serve ids would make stop() also stop serves attached after it)",
    ),
}

MUTANT_NOTES.update(
    {
        (
            "xǁRunnerCoreǁon_event",
            "self._view(serve.session_id).snapshots_streamed += 1",
            "self._view(serve.session_id).snapshots_streamed -= 1",
        ): (
            EQUIVALENT,
            "snapshots_streamed is only compared for equality: any change per snapshot works",
        ),
        (
            "xǁRunnerCoreǁon_event",
            "self._view(serve.session_id).snapshots_streamed += 1",
            "self._view(serve.session_id).snapshots_streamed += 2",
        ): (
            EQUIVALENT,
            "snapshots_streamed is only compared for equality: any change per snapshot works",
        ),
        (
            "xǁRunnerCoreǁon_event",
            "self._on_output(CallKey(serve.session_id, item.turn_id, item.call_id), now)",
            "self._on_output(None, now)",
        ): (GAP, MARKS + ": the output Item only marks applied"),
        (
            "xǁRunnerCoreǁon_event",
            "self._on_output(CallKey(serve.session_id, item.turn_id, item.call_id), now)",
            "self._on_output(CallKey(None, item.turn_id, item.call_id), now)",
        ): (GAP, MARKS + ": the output Item only marks applied"),
        (
            "xǁRunnerCoreǁon_event",
            "self._on_output(CallKey(serve.session_id, item.turn_id, item.call_id), now)",
            "self._on_output(CallKey(serve.session_id, item.turn_id, None), now)",
        ): (GAP, MARKS + ": the output Item only marks applied"),
        (
            "xǁRunnerCoreǁon_event",
            "if event.turn is not None and event.turn.subagent_id is not None:",
            "if event.turn is not None and event.turn.subagent_id is None:",
        ): (GAP, "the simulator's server runs no subagent Turns"),
        ("xǁRunnerCoreǁon_session_read", "view.reading = False", "view.reading = None"): (
            EQUIVALENT,
            "None is as false as False here",
        ),
        (
            "xǁRunnerCoreǁ_in_doubt",
            'self._decided(call, attempts, InDoubtAnswer(call.key, "rerun"), now)',
            'self._decided(call, attempts, InDoubtAnswer(None, "rerun"), now)',
        ): (EQUIVALENT, _KEY_UNREAD),
        (
            "xǁRunnerCoreǁ_in_doubt",
            'self._decided(call, attempts, InDoubtAnswer(call.key, "fail"), now)',
            'self._decided(call, attempts, InDoubtAnswer(None, "fail"), now)',
        ): (EQUIVALENT, _KEY_UNREAD),
        (
            "xǁRunnerCoreǁ_in_doubt",
            'self._decided(call, attempts, InDoubtAnswer(call.key, "fail"), now)',
            'self._decided(call, None, InDoubtAnswer(call.key, "fail"), now)',
        ): (
            EQUIVALENT,
            "_decided reads attempts only for a rerun; this answer is fail",
        ),
        (
            "xǁRunnerCoreǁ_in_doubt",
            'self._decided(call, attempts, InDoubtAnswer(call.key, "fail"), now)',
            "self._decided(call, attempts, InDoubtAnswer(call.key, None), now)",
        ): (EQUIVALENT, _ANY_KIND_FAILS),
        (
            "xǁRunnerCoreǁ_in_doubt",
            'self._decided(call, attempts, InDoubtAnswer(call.key, "fail"), now)',
            'self._decided(call, attempts, InDoubtAnswer(call.key, "FAIL"), now)',
        ): (EQUIVALENT, _ANY_KIND_FAILS),
        (
            "xǁRunnerCoreǁ_in_doubt",
            'self._decided(call, attempts, InDoubtAnswer(call.key, "fail"), now)',
            'self._decided(call, attempts, InDoubtAnswer(call.key, "XXfailXX"), now)',
        ): (EQUIVALENT, _ANY_KIND_FAILS),
        (
            "xǁRunnerCoreǁ_in_doubt",
            "self._effects.append(AskInDoubt(call.key, call.name, call.arguments, attempts))",
            "self._effects.append(AskInDoubt(call.key, call.name, None, attempts))",
        ): (GAP, HOOK + " (the hooks ignore the arguments)"),
        ("xǁRunnerCoreǁ_on_saved", "call.lease_held = False", "call.lease_held = None"): (
            EQUIVALENT,
            "None is as false as False here",
        ),
        ("xǁRunnerCoreǁ_on_saved", "call.event = None", 'call.event = ""'): (
            EQUIVALENT,
            "Call.event is written but never read by anything once the save answered",
        ),
        ("xǁRunnerCoreǁon_posted", 'self._done(call, "applied")', "self._done(call, None)"): (
            EQUIVALENT,
            _OUTCOME_UNREAD,
        ),
        ("xǁRunnerCoreǁon_posted", 'self._done(call, "applied")', 'self._done(call, "APPLIED")'): (
            EQUIVALENT,
            _OUTCOME_UNREAD,
        ),
        (
            "xǁRunnerCoreǁon_posted",
            'self._notes.append(CallSettled(call.key, call.name, "submitted"))',
            "self._notes.append(None)",
        ): (GAP, NOTES_),
        (
            "xǁRunnerCoreǁon_posted",
            'self._notes.append(CallSettled(call.key, call.name, "submitted"))',
            'self._notes.append(CallSettled(call.key, None, "submitted"))',
        ): (GAP, NOTES_),
        (
            "xǁRunnerCoreǁon_posted",
            'self._notes.append(CallSettled(call.key, call.name, "submitted"))',
            'self._notes.append(CallSettled(call.key, call.name, "SUBMITTED"))',
        ): (GAP, NOTES_),
        (
            "xǁRunnerCoreǁon_posted",
            "self._queue_mark(call.key, CallState.SUBMITTED, now)",
            "self._queue_mark(call.key, None, now)",
        ): (GAP, MARKS),
        (
            "xǁRunnerCoreǁon_posted",
            "self._on_refused(call, kind, error, now)",
            "self._on_refused(call, kind, None, now)",
        ): (GAP, "the error is only logged, and logging is off"),
        (
            "xǁRunnerCoreǁ_on_refused",
            'if kind == "retry_soon" and call.unknown_call_tries < UNKNOWN_CALL_RETRIES:',
            'if kind == "XXretry_soonXX" and call.unknown_call_tries < UNKNOWN_CALL_RETRIES:',
        ): (GAP, _ANY_REPORT),
        (
            "xǁRunnerCoreǁ_on_refused",
            'if kind == "retry_later":',
            'if kind == "XXretry_laterXX":',
        ): (GAP, _ANY_REPORT),
        ("xǁRunnerCoreǁ_on_refused", 'if kind == "conflict":', 'if kind == "XXconflictXX":'): (
            GAP,
            _ANY_REPORT,
        ),
        (
            "xǁRunnerCoreǁ_on_marks_written",
            "self._marks_writing = False",
            "self._marks_writing = None",
        ): (
            EQUIVALENT,
            "None is as false as False here",
        ),
        (
            "xǁRunnerCoreǁ_rejected",
            "self._queue_mark(call.key, CallState.REJECTED, now)",
            "self._queue_mark(None, CallState.REJECTED, now)",
        ): (GAP, MARKS),
        (
            "xǁRunnerCoreǁ_rejected",
            'self._done(call, "rejected")',
            'self._done(call, "XXrejectedXX")',
        ): (GAP, NOTES_),
        ("xǁRunnerCoreǁ_on_session", "view.snapshots += 1", "view.snapshots += 2"): (
            EQUIVALENT,
            "snapshots is only compared with earlier values of itself: any rising step works",
        ),
        (
            "xǁRunnerCoreǁ_hold",
            "self._enter(call, Phase.QUEUED, now)",
            "self._enter(call, Phase.QUEUED, None)",
        ): (EQUIVALENT, "_enter reads now only for READY"),
        (
            "xǁRunnerCoreǁ_decide_existing",
            "self._rejected(call, record, now, newly=False)",
            "self._rejected(call, None, now, newly=False)",
        ): (
            EQUIVALENT,
            "_rejected never reads its record argument",
        ),
        (
            "xǁRunnerCoreǁ_decide_existing",
            "self._rejected(call, record, now, newly=False)",
            "self._rejected(call, record, now, newly=None)",
        ): (EQUIVALENT, "None is as false as False"),
        (
            "xǁCallMachineǁ_decided",
            "call, TakeOver(call.key, self.owner, self.lease_seconds, attempts), now",
            "call, TakeOver(call.key, self.owner, self.lease_seconds, attempts), None",
        ): (
            EQUIVALENT,
            "_wait_for_slot hands now to _enter, which reads it only for a call made ready "
            "(ready_at); a call waiting for a slot never reads it",
        ),
        # Fifth pass: survivors the 37 seeds newly reach.
        (
            "xǁCallMachineǁ_time_out",
            "error = timeout_error(function.timeout, idempotent=function.idempotent)",
            "error = timeout_error(function.timeout, idempotent=None)",
        ): (
            GAP,
            "the failed result of a timed-out idempotent call then says its outcome is "
            "unknown, as a non-idempotent one's does: the wording of the results the model "
            "gets is not checked (tests/runner's job)",
        ),
        (
            "xǁCallMachineǁ_leave_unknown",
            'report_to = "left_pending" if cleared_to_rerun(record) else "in_doubt"',
            'report_to = "LEFT_PENDING" if cleared_to_rerun(record) else "in_doubt"',
        ): (
            GAP,
            "a call a person cleared to run again, found stale or in doubt by a worker that "
            "lacks its function, while a serve reports it (the report has no LEFT_PENDING "
            "list, so the mutant would raise): these seeds do not show it",
        ),
        (
            "xǁCallMachineǁ_leave_unknown",
            'Outcome.LEFT_PENDING if report_to == "left_pending" else Outcome.IN_DOUBT_ELSEWHERE,',
            'Outcome.LEFT_PENDING if report_to != "left_pending" else Outcome.IN_DOUBT_ELSEWHERE,',
        ): (
            GAP,
            NOTES_ + ": left_pending and in_doubt_elsewhere are not checked against the record",
        ),
        (
            "xǁCallMachineǁ_count_run",
            'if event.get("success") is False:',
            'if event.get("XXsuccessXX") is False:',
        ): (
            GAP,
            REPORT + ": function_errors is exact only for the fault-free worker's serve of "
            "a served Session with no timeout, and these 37 seeds have no raising function "
            "there (the control _failed_functions_not_counted is first caught at seed 16)",
        ),
        ("xǁCallMachineǁ_save_and_post", "owner=self.owner,", "owner=None,"): (
            EQUIVALENT,
            _POST_RECORD,
        ),
        ("xǁCallMachineǁ_save_and_post", "created_at=0.0,", "created_at=1.0,"): (
            EQUIVALENT,
            _POST_RECORD,
        ),
        (
            "xǁCallMachineǁ_on_saved",
            "self._rejected(call, record, now, newly=False)",
            "self._rejected(call, record, None, newly=False)",
        ): (
            GAP,
            TURN + ": with no read due, _want_read(view, None) asks for none (with one "
            "due it would raise), so the Turn's next read comes from a poll or an event",
        ),
        (
            "xǁServeTrackerǁsettling",
            "self.busy() or bool(self._marks) or self._marks_writing or bool(self._saving_posted)",
            "self.busy() or bool(self._marks) or self._marks_writing and bool(self._saving_posted)",
        ): (
            GAP,
            "close() while only the save of a result posted as it was saved is in flight "
            "(the defect of seed 603): the control _close_leaves_marks_unwritten is first "
            "caught at seed 206, and these 37 seeds do not close a worker at that moment",
        ),
        (
            "xǁServeTrackerǁ_on_turns_ended",
            "if call.phase in _UNANSWERED:",
            "if call.phase not in _UNANSWERED:",
        ): (GAP, _ENDED_BY_READ),
        (
            "xǁServeTrackerǁ_on_turns_ended",
            "view.ended_turns.add(turn_id)",
            "view.ended_turns.add(None)",
        ): (
            GAP,
            _ENDED_BY_READ,
        ),
        ("xǁServeTrackerǁ_reads_due", "view.reads_sent += 1", "view.reads_sent -= 1"): (
            GAP,
            _ENDED_BY_READ,
        ),
        ("x_content_key", "key.append((kind, str(value)))", "key.append((kind, str(None)))"): (
            GAP,
            TURN + ": run_turn learns its Turn's id from the answer to its input; the "
            "content key tells inputs apart only when that answer is lost and another input "
            "with parts of the same types waits",
        ),
        (
            "xǁCallMachineǁon_late_event",
            "if isinstance(event, TerminalTurnEvent) and _cancelled(event):",
            "if isinstance(event, TerminalTurnEvent) or _cancelled(event):",
        ): (
            GAP,
            "functions of a Turn that completed or failed after their serve ended are told "
            "to stop too: nothing checks that a function is told (ctx.cancelled) only when "
            "asked, only that it is told when asked",
        ),
        (
            "xǁCallMachineǁ_slot_ready",
            "return taken < self.max_concurrency and self._slot_free(call)",
            "return taken < self.max_concurrency or self._slot_free(call)",
        ): (
            GAP,
            TIMING + ": a call read while its function is at its own max_concurrency "
            "waits for a slot before its look-up instead of after: the same decision, later",
        ),
        (
            "xǁCallMachineǁ_start_with_claim",
            "or now < self._store_retry_at  # the claim would wait: so does the run",
            "or now <= self._store_retry_at  # the claim would wait: so does the run",
        ): (
            GAP,
            TIMING + ": at the very instant the store may be tried again the run waits for "
            "its claim's answer instead of starting with it, which the option allows",
        ),
        (
            "xǁCallMachineǁ_leave_unknown",
            "view = self._view(call.key.session_id)",
            "view = self._view(None)",
        ): (
            GAP,
            TIMING + ": a call left to another worker is not remembered as not this "
            "runner's, so each read decides it again (another look-up, the same outcome)",
        ),
        (
            "xǁCallMachineǁ_on_claim_of_run",
            'call.lease_until = call.claim_sent_at + self.lease_seconds if won else float("-inf")',
            'call.lease_until = call.claim_sent_at + self.lease_seconds if (won) and False else float("-inf")',
        ): (
            EQUIVALENT,
            "lease_until is read only to start a queued call (_start_queued) and raised by "
            "renewals; a call started with its claim is running, and it is queued again only "
            "through _hold, which sets lease_until afresh",
        ),
        (
            "xǁCallMachineǁ_on_claim_of_run",
            "self._finish_run(call, event, ran, now)",
            "self._finish_run(call, event, None, now)",
        ): (
            GAP,
            "a run that ended before its claim was answered, then lost the save to another "
            "worker's verdict: only then does run_result (read for its truth) decide whether "
            "its outcome is kept beside the record; no seed here has both",
        ),
        (
            "xǁCallMachineǁ_drop_run",
            "call.claim_unanswered = False",
            "call.claim_unanswered = True",
        ): (
            GAP,
            "after a lost claim of a run started with it, the stale flag matters only if a "
            "store error or a timeout of that call follows, which these seeds do not show",
        ),
        (
            "xǁCallMachineǁ_on_saved",
            "self._decide_existing(call, record, False, now)",
            "self._decide_existing(call, record, False, None)",
        ): (
            EQUIVALENT,
            "the record has no result here, so _decide_existing leaves the call to another "
            "worker or waits for a slot, and neither reads now (_enter reads it only for a "
            "call made ready)",
        ),
        (
            "x__cancelled",
            'return (getattr(turn, "status", None) or _terminal_status(event)) == "cancelled"',
            'return (getattr(turn, "XXstatusXX", None) or _terminal_status(event)) == "cancelled"',
        ): (
            GAP,
            "every simulated terminal event's type matches its Turn's status, so the "
            "fallback to the type answers as the Turn would",
        ),
        (
            "xǁRunnerCoreǁ_decide_existing",
            'self._done(call, "duplicate")',
            'self._done(call, "XXduplicateXX")',
        ): (GAP, NOTES_),
        (
            "xǁRunnerCoreǁ_consider",
            'self._count(pending.key.session_id, "duplicates_skipped")',
            'self._count(None, "duplicates_skipped")',
        ): (GAP, REPORT),
        (
            "xǁRunnerCoreǁ_consider",
            'if function is None and self.unknown_functions == "leave":',
            'if function is None and self.unknown_functions != "leave":',
        ): (GAP, UNKNOWN),
        (
            "xǁRunnerCoreǁ_consider",
            'if function is None and self.unknown_functions == "leave":',
            'if function is None and self.unknown_functions == "LEAVE":',
        ): (GAP, UNKNOWN),
        (
            "xǁRunnerCoreǁon_store_answer",
            "self._on_marks_written(effect, answer.error, now)",
            "self._on_marks_written(effect, None, now)",
        ): (GAP, MARKS),
        (
            "xǁRunnerCoreǁon_store_answer",
            'self._done(call, "released")',
            "self._done(call, None)",
        ): (GAP, LIVENESS),
        ("xǁRunnerCoreǁon_store_answer", 'self._done(call, "released")', "self._done(call, )"): (
            GAP,
            LIVENESS,
        ),
        (
            "xǁRunnerCoreǁon_store_answer",
            'self._done(call, "released")',
            'self._done(call, "RELEASED")',
        ): (GAP, LIVENESS),
        ("xǁRunnerCoreǁon_posted", "error = outcome.error", "error = None"): (
            GAP,
            LIVENESS + " (a failed POST seen as sent)",
        ),
        (
            "x__sendable",
            '"".join((key.session_id, key.turn_id, key.call_id)).encode("utf-8")',
            '"XXXX".join((key.session_id, key.turn_id, key.call_id)).encode("utf-8")',
        ): (
            EQUIVALENT,
            "an ASCII separator changes nothing: encoding fails iff an id has a lone surrogate",
        ),
        (
            "x__sendable",
            '"".join((key.session_id, key.turn_id, key.call_id)).encode("utf-8")',
            '"".join((key.session_id, key.turn_id, key.call_id)).encode("UTF-8")',
        ): (EQUIVALENT, "codec names are case-insensitive"),
        ("x_release", "if record.attempts == 1:", "if record.attempts == 2:"): (
            GAP,
            "a released first claim is kept in doubt instead of deleted, and the call is "
            "failed in doubt although no function started: no check that a call failed "
            "in doubt was ever started",
        ),
        (
            "x_take_over",
            "record.state is CallState.IN_DOUBT or record.owner == owner or is_stale(record, now=now)",
            "record.state is CallState.IN_DOUBT or record.owner != owner or is_stale(record, now=now)",
        ): (GAP, DEFENSE + " (here: taking over a live claim)"),
        ("x_take_over", "attempts=record.attempts + 1,", "attempts=record.attempts + 2,"): (
            GAP,
            "attempts are checked against themselves (max_attempts), not against the runs "
            "a call in doubt got",
        ),
        (
            "x_renew_lease",
            "if record.owner != owner or record.state is not CallState.STARTED or record.has_result():",
            "if record.owner == owner or record.state is not CallState.STARTED or record.has_result():",
        ): (
            GAP,
            "own leases are never renewed: no function outlives its lease in these seeds",
        ),
        (
            "x_renew_lease",
            "return replace(record, lease_expires_at=now + lease_seconds, updated_at=now)",
            "return replace(record, updated_at=now)",
        ): (
            GAP,
            "leases are never extended: no function outlives its lease in these seeds",
        ),
        (
            "x_renew_lease",
            "return replace(record, lease_expires_at=now + lease_seconds, updated_at=now)",
            "return replace(None, lease_expires_at=now + lease_seconds, updated_at=now)",
        ): (
            GAP,
            "renewals fail (logged): no function outlives its lease in these seeds",
        ),
        ("x_settle_by_hand", "result=result,", "result=None,"): (GAP, _RARE_BY_HAND),
        ("x_settle_by_hand", "result=result,", ""): (GAP, _RARE_BY_HAND),
        (
            "x_settle_by_hand",
            "if record.state is not CallState.IN_DOUBT and not is_stale(record, now=now):",
            "if record.state is not CallState.IN_DOUBT and is_stale(record, now=now):",
        ): (
            GAP,
            "the simulated person settles only calls in doubt: a live claim settled by "
            "hand is never asked for, so the refusal is not tested",
        ),
        (
            "x_settle_by_hand",
            "if record.state is not CallState.IN_DOUBT and not is_stale(record, now=now):",
            "if record.state is not CallState.IN_DOUBT or not is_stale(record, now=now):",
        ): (
            GAP,
            "a person's command refused is taken by the simulator for a race it lost",
        ),
        (
            "xǁRunnerCoreǁ_start_queued",
            "self._notes.append(CallStarted(call.key, call.name, call.attempts))",
            "self._notes.append(None)",
        ): (GAP, NOTES_),
        (
            "xǁRunnerCoreǁ_start_queued",
            "self._notes.append(CallStarted(call.key, call.name, call.attempts))",
            "self._notes.append(CallStarted(call.key, None, call.attempts))",
        ): (GAP, NOTES_),
        (
            "xǁRunnerCoreǁ_time_out",
            "if call.phase is not Phase.RUNNING or call.deadline is None or call.deadline > now:",
            "if call.phase is not Phase.RUNNING or call.deadline is None or call.deadline >= now:",
        ): (GAP, TIMING + " (at the deadline's exact instant)"),
        ("xǁRunnerCoreǁon_function_done", "session = call.key.session_id", "session = None"): (
            GAP,
            REPORT,
        ),
        (
            "xǁRunnerCoreǁon_function_done",
            'self._count(session, "calls_run")',
            'self._count(None, "calls_run")',
        ): (GAP, REPORT),
        (
            "xǁRunnerCoreǁon_function_done",
            'if outcome.event.get("success") is False:',
            "if outcome.event.get(None) is False:",
        ): (GAP, REPORT),
        (
            "xǁRunnerCoreǁon_function_done",
            'if outcome.event.get("success") is False:',
            'if outcome.event.get("SUCCESS") is False:',
        ): (GAP, REPORT),
        (
            "xǁRunnerCoreǁon_function_done",
            'if outcome.event.get("success") is False:',
            'if outcome.event.get("success") is True:',
        ): (GAP, REPORT),
        ("xǁRunnerCoreǁon_function_done", "late = outcome.event", "late = None"): (GAP, _LATE),
        (
            "xǁRunnerCoreǁon_function_done",
            "late = failure_event(outcome.key, ENDED_WITHOUT_RESULT)",
            "late = None",
        ): (GAP, _LATE),
        (
            "xǁRunnerCoreǁon_function_done",
            "self._effects.append(KeepLateOutcome(outcome.key, late))",
            "self._effects.append(KeepLateOutcome(outcome.key, None))",
        ): (GAP, _LATE),
        (
            "xǁRunnerCoreǁon_session_read",
            "serve.target_turn_status = answer.turn.status",
            "serve.target_turn_status = None",
        ): (
            GAP,
            TURN + ": a Turn whose end only a read shows (its end event lost)",
        ),
    }
)


#: Notes on the survivors of the every-16th sample of 2026-12-05 (see docs/mutation.md).
MUTANT_NOTES.update(
    {
        (
            "xǁRunnerCoreǁ__init__",
            'self._renew_sent_at = float("-inf")',
            "self._renew_sent_at = None",
        ): (
            EQUIVALENT,
            "_renew_sent_at is set whenever a renewal is sent, before any answer reads it",
        ),
        (
            "xǁRunnerCoreǁfinished",
            'if serve.until == "created":',
            'if serve.until == "XXcreatedXX":',
        ): (
            GAP,
            TURN
            + ": run_turn's wait for its Turn's creation falls through to the settled path, which returns the same Turn later",
        ),
        (
            "xǁRunnerCoreǁ_refused_in_turn",
            "view = self._view(serve.session_id)",
            "view = self._view(None)",
        ): (
            GAP,
            "no run_turn here waits on a Turn whose result the server refused: since redirects are raised as the client raises them, only repeated 400s refuse a result, and none of these seeds has them while a run_turn waits",
        ),
        (
            "xǁRunnerCoreǁ_settled",
            "and not (call.phase in _NOT_STARTED and call.retry is not None)",
            "and not (call.phase in _NOT_STARTED and call.retry is None)",
        ): (
            GAP,
            TIMING
            + ": a serve returns a round sooner or later while a claim waits to be retried; the fault-free worker's idle serves are checked only when they return",
        ),
        (
            "xǁRunnerCoreǁon_event",
            "and isinstance(event, ItemDoneEvent)\nand item.turn_id is not None",
            "and isinstance(event, ItemDoneEvent) or item.turn_id is not None",
        ): (GAP, TIMING + ": a stream Item heeded or not is made up for by the next read"),
        (
            "xǁRunnerCoreǁon_event",
            'turn = getattr(event, "turn", None)',
            'turn = getattr(event, "XXturnXX", None)',
        ): (
            GAP,
            "the simulated terminal events carry no Turn object, so reading it or not is the same here: a server that sends the Turn with its end event would kill it",
        ),
        (
            "xǁRunnerCoreǁon_event",
            "self._cancel_turn(serve.session_id, event.turn_id, now)",
            "self._cancel_turn(serve.session_id, None, now)",
        ): (
            GAP,
            "a cancel event not applied: the Session snapshot published with the same change cancels the Turn's calls in the same round (a stream that carries only the end event would kill it)",
        ),
        (
            "xǁRunnerCoreǁ_stop_turn",
            "elif call.phase is Phase.WAITING:",
            "elif call.phase is not Phase.WAITING:",
        ): (
            GAP,
            LIVENESS
            + ": a cancelled Turn's saved results are dropped instead of marked abandoned, and the record stays completed (allowed: a mark is bookkeeping)",
        ),
        (
            "xǁRunnerCoreǁon_session_read",
            "if now - view.read_warned_at >= READ_WARN_EVERY:",
            "if now + view.read_warned_at >= READ_WARN_EVERY:",
        ): (
            GAP,
            "[logs] how often a failed read is logged (at most every READ_WARN_EVERY s): logging is off in the simulator",
        ),
        (
            "xǁRunnerCoreǁ_unreachable",
            "if self.unreachable_timeout is None or down < self.unreachable_timeout:",
            "if self.unreachable_timeout is None or down <= self.unreachable_timeout:",
        ): (
            GAP,
            TIMING
            + ": the boundary instant; down equals unreachable_timeout exactly only by chance on these float clocks",
        ),
        ("xǁRunnerCoreǁ_on_output", "call = self.calls.get(key)", "call = None"): (GAP, MARKS),
        (
            "xǁRunnerCoreǁ_on_output",
            "elif call.phase is Phase.POSTING:",
            "elif call.phase is not Phase.POSTING:",
        ): (GAP, MARKS),
        ("xǁRunnerCoreǁ_hold", "call.lease_held = True", "call.lease_held = None"): (
            GAP,
            "[lease] the lease check (World._check_leases) reads the core's own lease_held flag, so a core that forgets it holds a lease skips both the renewal and the check: a check from the store's side alone would kill it",
        ),
        (
            "xǁRunnerCoreǁ_decide_existing",
            "self._unconfirmed.pop(call.key, None)",
            "self._unconfirmed.pop(None, None)",
        ): (
            GAP,
            TIMING
            + ": a claim of ours found committed is taken for another's, and decided again by a later read",
        ),
        (
            "xǁRunnerCoreǁ_start_queued",
            "if self._renew_at is None or self._renew_at > due:",
            "if self._renew_at is None and self._renew_at > due:",
        ): (
            GAP,
            TIMING
            + ": the renewal that confirms a queued call's lease is scheduled later, so the call starts later",
        ),
        ("xǁRunnerCoreǁon_function_done", "session = call.key.session_id", "session = None"): (
            GAP,
            REPORT + " (here calls_run and function_errors counted for no serve)",
        ),
        (
            "xǁRunnerCoreǁ_take_batches",
            "if self._view(session_id).posting or self._lingering(session_id, calls, now):",
            "if self._view(session_id).posting or self._lingering(None, calls, now):",
        ): (
            GAP,
            TIMING + ": results are posted at once instead of lingering for the rest of the batch",
        ),
        (
            "xǁRunnerCoreǁon_posted",
            'if kind in ("retry_later", "no_access") and view is not None:',
            'if kind in ("retry_later", "XXno_accessXX") and view is not None:',
        ): (
            GAP,
            "no check that a redirect ends its serves at once (docs/operations.md): the serve retries the POST later, and it succeeds",
        ),
        (
            "xǁRunnerCoreǁon_posted",
            'if len(mine) > 1 and kind != "retry_later":',
            'if len(mine) >= 1 and kind != "retry_later":',
        ): (
            GAP,
            TIMING
            + ": a refused batch of one is sent again alone before it is judged: one more POST",
        ),
        (
            "xǁRunnerCoreǁ_on_refused",
            "delay = min(POST_RETRY_MAX_DELAY, POST_RETRY_DELAY * 2 ** min(call.post_failures, 16))",
            "delay = min(POST_RETRY_MAX_DELAY, POST_RETRY_DELAY / 2 ** min(call.post_failures, 16))",
        ): (GAP, TIMING),
        ("xǁRunnerCoreǁ_on_marks_written", "if error is None:", "if error is not None:"): (
            GAP,
            MARKS,
        ),
        (
            "xǁRunnerCoreǁ_on_marks_written",
            "self._marks_due = now + MARK_DELAY",
            "self._marks_due = now - MARK_DELAY",
        ): (
            GAP,
            TIMING
            + ": marks written at once instead of batched for half a second: more store writes, the same states",
        ),
        (
            "xǁRunnerCoreǁ_on_renewed",
            "delay = STORE_RETRY_DELAY * 2 ** min(self._renew_failures, 16)",
            "delay = STORE_RETRY_DELAY * 2 * min(self._renew_failures, 16)",
        ): (GAP, TIMING),
        ("xǁRunnerCoreǁ_on_renewed", "call = self.calls.get(key)", "call = None"): (
            GAP,
            "[lease] renewal answers are ignored: a queued call whose claim is old waits for a confirmation it never gets; no check that a claimed call starts in time, and the final worker runs what is left",
        ),
        (
            "xǁRunnerCoreǁ_store_failed",
            "serve.report.store_errors += 1",
            "serve.report.store_errors += 2",
        ): (GAP, REPORT),
        (
            "xǁRunnerCoreǁtake_effects",
            "if read_at is not None and read_at <= now:",
            "if read_at is not None and read_at < now:",
        ): (GAP, TIMING),
        (
            "xǁRunnerCoreǁ_next_read",
            'if view.status == "requires_action" and not self.busy(view.session_id):',
            'if view.status != "requires_action" and not self.busy(view.session_id):',
        ): (GAP, TIMING),
        ("xǁRunnerCoreǁ_done", "call.outcome = outcome", "call.outcome = None"): (
            GAP,
            NOTES_ + " (Call.outcome is only read for a posted call's redecision)",
        ),
        (
            "x_classify_refusal",
            "if isinstance(error, BadRequestError) and _UNKNOWN_CALL in _message(error):",
            "if isinstance(error, BadRequestError) or _UNKNOWN_CALL in _message(error):",
        ): (
            GAP,
            "the simulated server's only 400 is \"Unknown pending tool call\", so every 400 is one: a 400 for a bad result would kill it (a unit test's job)",
        ),
        ("x_classify_refusal", "message = _message(error)", "message = _message(None)"): (
            GAP,
            'a refusal misread as "try later" (the message is lost): the result is posted again and again and never reported; no check that every refusal is reported',
        ),
        (
            "x_classify_refusal",
            'return "retry_later" if _worth_retrying(error.status_code) else "rejected"',
            'return "retry_later" if _worth_retrying(error.status_code) else "XXrejectedXX"',
        ): (EQUIVALENT, "_on_refused treats every kind it does not name as rejected"),
        (
            "x__url_of",
            "return str(request.url.copy_with(username=None, password=None, query=None))",
            "return str(request.url.copy_with(username=None, password=None, ))",
        ): (
            GAP,
            "[logs] URLs in log lines keep their query: logging is off, and the simulated URL has no query",
        ),
        (
            "x_release",
            "if record.state is not CallState.STARTED or record.has_result() or record.owner != owner:",
            "if record.state is not CallState.STARTED or record.has_result() or record.owner == owner:",
        ): (GAP, DEFENSE + " (here: releasing another worker's claim)"),
        ("x_settle_by_hand", "in_doubt_at=_first_doubt(record, now),", ""): (
            GAP,
            "a stale call settled by hand with a result keeps no in_doubt_at: the store audit requires in_doubt_at of calls in doubt, not of calls a person settled",
        ),
        (
            "xǁRunnerCoreǁ_server_failing",
            "self._unreachable(view, error, now)",
            "self._unreachable(view, None, now)",
        ): (
            GAP,
            "[give-up] the error a failing server is given up with is lost from the serve's error",
        ),
        (
            "xǁRunnerCoreǁ_server_failing",
            "down = now - view.unreachable_since",
            "down = now + view.unreachable_since",
        ): (GAP, TIMING),
        (
            "xǁRunnerCoreǁ_server_failing",
            "self._end_serves(view, fatal)",
            "self._end_serves(view, None)",
        ): (GAP, "[give-up] a serve given up on ends without its error"),
        (
            "xǁRunnerCoreǁ_on_session",
            "view.not_mine &= view.pending",
            "view.not_mine = view.pending",
        ): (
            GAP,
            "calls left to other workers are forgotten per read; no check of which calls a serve waits for",
        ),
        (
            "xǁRunnerCoreǁ_on_store_refused",
            'if isinstance(effect, SaveResult) and effect.event.get("success") is not False:',
            'if isinstance(effect, SaveResult) and effect.event.get("success") is not True:',
        ): (
            GAP,
            "a store that refuses a call's data for good (not an outage) is simulated only for ids, whose failure is posted unsaved",
        ),
    }
)

_SAME_CODE = (
    "is_idempotency_conflict compares the same code with the same spelling, so the "
    "first test is redundant: either one decides alone"
)
_STR_HOLDS_MESSAGE = (
    "_message is only given APIStatusErrors, whose str() is '{status}: {message} "
    "(code=..., param=...)': it holds the message, and the phrases looked for (with "
    "spaces) cannot come from the status or a code"
)
_NO_TYPE = (
    "every content part, sent or stored, has a type: the default is never used (and "
    "would be used alike on both sides compared)"
)
MUTANT_NOTES.update(
    {
        (
            "x_classify_refusal",
            'if code == "idempotency_conflict" or error.is_idempotency_conflict:',
            'if code == "IDEMPOTENCY_CONFLICT" or error.is_idempotency_conflict:',
        ): (EQUIVALENT, _SAME_CODE),
        (
            "x_classify_refusal",
            'if code == "idempotency_conflict" or error.is_idempotency_conflict:',
            'if code == "XXidempotency_conflictXX" or error.is_idempotency_conflict:',
        ): (EQUIVALENT, _SAME_CODE),
        (
            "x__message",
            'return str(getattr(error, "message", error)).lower()',
            'return str(getattr(None, "message", error)).lower()',
        ): (EQUIVALENT, _STR_HOLDS_MESSAGE),
        (
            "x__message",
            'return str(getattr(error, "message", error)).lower()',
            'return str(getattr(error, "XXmessageXX", error)).lower()',
        ): (EQUIVALENT, _STR_HOLDS_MESSAGE),
        (
            "x__message",
            'return str(getattr(error, "message", error)).lower()',
            'return str(getattr(error, "MESSAGE", error)).lower()',
        ): (EQUIVALENT, _STR_HOLDS_MESSAGE),
        (
            "x__message",
            'return str(getattr(error, "message", error)).lower()',
            'return str(getattr(error, "message", None)).lower()',
        ): (EQUIVALENT, "every error _message is given has a message: the default is never used"),
        ("xǁServeTrackerǁ_reads_due", "view.reads_sent += 1", "view.reads_sent += 2"): (
            EQUIVALENT,
            "reads_sent is only compared with a call's known_at_read, a copy of it: counting in twos keeps every comparison",
        ),
        (
            "x_content_key",
            'kind = str(getattr(part, "type", ""))',
            'kind = str(getattr(part, "type", "XXXX"))',
        ): (EQUIVALENT, _NO_TYPE),
        (
            "x_content_key",
            'kind = str(getattr(part, "type", ""))',
            'kind = str(getattr(part, "type", None))',
        ): (EQUIVALENT, _NO_TYPE),
        (
            "x_encode_late_outcome",
            'text.encode("utf-8")  # refuses lone surrogates, which no database stores',
            'text.encode("UTF-8")  # refuses lone surrogates, which no database stores',
        ): (EQUIVALENT, "codec names are case-insensitive"),
        (
            "xǁServeTrackerǁ_report_action",
            "view.reported_actions.popitem(last=False)",
            "view.reported_actions.popitem(last=None)",
        ): (EQUIVALENT, "popitem takes last for its truth: None pops the oldest, as False does"),
        (
            "xǁCallMachineǁ_in_doubt",
            "self._decided(call, attempts, InDoubtAnswer(call.key, Verdict.FAIL), now)",
            "self._decided(call, attempts, InDoubtAnswer(None, Verdict.FAIL), now)",
        ): (EQUIVALENT, _KEY_UNREAD),
        (
            "xǁCallMachineǁ_leave_unknown",
            'Outcome.LEFT_PENDING if report_to == "left_pending" else Outcome.IN_DOUBT_ELSEWHERE,',
            'Outcome.LEFT_PENDING if report_to == "LEFT_PENDING" else Outcome.IN_DOUBT_ELSEWHERE,',
        ): (
            GAP,
            NOTES_ + ": a call left pending for another worker is noted in doubt elsewhere, "
            "and no check compares that note with the record (not in doubt)",
        ),
        (
            "x__same_result",
            "event, sort_keys=True",
            "event, sort_keys=None",
        ): (
            GAP,
            "the dict comparison before it decides every simulated result (plain JSON the "
            "store gives back equal); only a result its JSON round trip changes (a tuple, "
            "a non-string key) reaches the sorted comparison",
        ),
        (
            "x_content_key",
            'kind = str(getattr(part, "type", ""))',
            'kind = str(getattr(part, "type", ))',
        ): (
            GAP,
            "every simulated message part has a type; a part without one would raise "
            "instead of comparing as untyped",
        ),
        (
            "xǁServeTrackerǁ_report_action",
            'ident = getattr(action, "request_id", None) or getattr(action, "environment_id", None)',
            'ident = getattr(action, "request_id", None) and getattr(action, "environment_id", None)',
        ): (
            GAP,
            "every action of one kind gets one name, so a runner tells on_action of the first "
            "of each kind per Session only; the check that the fault-free worker's hook is "
            "told of every action it saw needs that worker to see two of a kind in one "
            "Session, which these seeds do not show",
        ),
        (
            "xǁHousekeepingǁ_housekeeping_due",
            "and (len(self._marks) >= MARK_BATCH or now >= self._marks_due)\nand now >= self._store_retry_at",
            "and (len(self._marks) >= MARK_BATCH or now >= self._marks_due) or now >= self._store_retry_at",
        ): (
            GAP,
            TIMING + ": queued marks are written whenever the store may be tried, before "
            "their batch fills or falls due (more, smaller writes; _flush_marks itself "
            "skips an empty queue and a write in flight)",
        ),
    }
)

#: Per function (mangled name, e.g. ``xǁRunnerCoreǁstop``), for its survivors on lines
#: the simulator runs: the class and the reason or the scenario that would kill them.
FUNCTION_NOTES: dict[str, tuple[str, str]] = {
    "xǁPendingCallǁfrom_item": (
        GAP,
        "a call the stream announces is also listed by the next Session read under the "
        "right key; a stream-only announcement (reads failing) would kill it",
    ),
    "xǁInDoubtDecisionǁresult": (GAP, HOOK),
    "xǁServeǁstreamed_answer": (GAP, TURN),
    "xǁRunnerCoreǁattach": (
        GAP,
        TIMING + ": recover's first read is only sooner; the next round reads anyway",
    ),
    "xǁRunnerCoreǁdetach": (
        GAP,
        "claims left by an ended serve are released later or lapse; a check that a "
        "detached serve leaves no claim of an unstarted call would kill it (also " + MEMORY + ")",
    ),
    "xǁRunnerCoreǁstop": (GAP, STOP),
    "xǁRunnerCoreǁexpect_turn": (GAP, TIMING + "; run_turn falls back to listing Turns"),
    "xǁRunnerCoreǁstart_turn": (GAP, TURN),
    "xǁRunnerCoreǁfinished": (GAP, TURN + "; " + REPORT + "; " + MARKS),
    "xǁRunnerCoreǁ_refused_in_turn": (GAP, TURN + "; " + REPORT),
    "xǁRunnerCoreǁon_dropped": (GAP, REPORT),
    "xǁRunnerCoreǁon_stream_failed": (
        GAP,
        "no stream that cannot be opened again (other than 404) while a serve waits",
    ),
    "xǁRunnerCoreǁon_event": (
        GAP,
        "a Turn cancelled while its calls are queued or running, seen on the stream "
        "before any read; calls announced on the stream only (reads failing); terminal "
        "events whose Turn status differs from their type; else " + TURN,
    ),
    "xǁRunnerCoreǁ_cancel_turn": (
        GAP,
        "a Turn cancelled while one of its calls is queued or running and another Turn's "
        "call is running: the cancel must reach exactly that Turn's calls",
    ),
    "xǁRunnerCoreǁon_session_read": (
        GAP,
        "a failed read followed by a quiet stream: only the retry after poll_interval "
        "moves the serve on; in the simulator something else always reads again",
    ),
    "xǁRunnerCoreǁ_server_failing": (
        GAP,
        "reads or POSTs failing with an HTTP error retrying cannot help (401, 403, 400) "
        "or with 5xx for longer than unreachable_timeout: the serve must end with that "
        "error, at once or then; no seed checks which error ends a serve, or when",
    ),
    "xǁRunnerCoreǁ_end_serves": (
        GAP,
        "serves must end on a server that failed for unreachable_timeout and forever ones "
        "must not (both checked, the give-up's timing only for a serve with no deadline); "
        "what survives changes which serves end, and these 37 seeds meet no outage that "
        "long beside a serve with no deadline of the kind it changes",
    ),
    "xǁRunnerCoreǁ_on_lookup": (
        GAP,
        TIMING + ": a found record ignored is claimed afresh, lost, and decided the same; "
        "a stale one taken for live waits for a later read",
    ),
    "xǁRunnerCoreǁ_on_marked_in_doubt": (
        GAP,
        "a mark-in-doubt that loses to another worker (changed=False) is rare in these "
        "seeds; no check that a worker renews only leases of calls it runs",
    ),
    "xǁRunnerCoreǁon_in_doubt_answer": (
        GAP,
        HOOK + "; no hook answers rerun, nor after its call was settled another way",
    ),
    "xǁRunnerCoreǁ_decided": (GAP, SAY),
    "xǁRunnerCoreǁ_start_queued": (
        GAP,
        _PER_NAME + "; and in these seeds no function outlives its timeout (seeds 0-99 "
        "have some: tests/sim/test_sim.py)",
    ),
    "xǁRunnerCoreǁ_time_out": (
        GAP,
        _PER_NAME + "; no check of who saved a timed-out call's failure",
    ),
    "xǁRunnerCoreǁon_function_done": (
        GAP,
        _PER_NAME + "; an outcome that arrives after the deadline, before the timekeeper "
        "looked, and a function that exits without a result, are rare in these seeds",
    ),
    "xǁRunnerCoreǁ_release_unrun": (
        GAP,
        "a serve that ends holding claims (or store retries) of calls not started: no "
        "check that they are given back at once, or redecided when announced again",
    ),
    "xǁRunnerCoreǁ_give_back": (
        GAP,
        "a claim given back is released later or lapses: no check that it is at once",
    ),
    "xǁRunnerCoreǁ_save": (
        GAP,
        "a save by a worker whose lapsed claim another worker took over: the store "
        "must refuse it; no seed has a worker save after losing its claim",
    ),
    "xǁRunnerCoreǁ_take_batches": (
        GAP,
        TIMING + ": results still go out, in more or later POSTs (no check of batching)",
    ),
    "xǁDeleteǁ__repr__": (GAP, "repr only: nothing but a debugger shows it"),
    "x_validate_lease": (GAP, "every simulated lease is valid: a bad one is a unit test's job"),
    "x_encode_result": (GAP, "every simulated result is plain JSON: bad ones are unit tests' job"),
    "x_encode_late_outcome": (GAP, ODD_LATE),
    "x__storable": (GAP, ODD_LATE),
    "x__storable_leaf": (GAP, ODD_LATE),
    "x__describe": (GAP, ODD_LATE),
    "x__clean_text": (GAP, ODD_LATE),
    "x_decode_result": (GAP, SQL),
    "x_record_to_row": (GAP, SQL),
    "x_record_from_row": (GAP, SQL),
    "x__record_from_row": (GAP, SQL),
    "x_started_record": (GAP, STAMPS),
    "x__first_doubt": (GAP, STAMPS),
    "x_keep_late_outcome": (GAP, STAMPS),
    "xǁRunnerCoreǁ_lingering": (GAP, TIMING + ": results go out in more or later POSTs"),
    "xǁRunnerCoreǁon_posted": (
        GAP,
        TIMING + ": POSTs failing for longer than unreachable_timeout, and a batch of "
        "several refused for one bad result, are rare in these seeds",
    ),
    "xǁRunnerCoreǁ_on_refused": (GAP, TIMING + ": retry delays and counts of refused POSTs"),
    "xǁRunnerCoreǁ_rejected": (
        GAP,
        TURN + "; a Turn that waits on a refused result is mostly settled by the "
        "simulated person before any run_turn could return it as waiting",
    ),
    "xǁRunnerCoreǁ_queue_mark": (GAP, MARKS),
    "xǁRunnerCoreǁ_flush_marks": (GAP, MARKS),
    "xǁRunnerCoreǁ_on_marks_written": (GAP, MARKS),
    "xǁRunnerCoreǁ_on_renewed": (
        GAP,
        TIMING + ": when leases are renewed; a lost lease is only logged, and the lease "
        "invariant fires only for a function that outlives its lease",
    ),
    "xǁRunnerCoreǁ_on_store_error": (
        GAP,
        TIMING + ": when a store effect is retried after an outage (it is, later)",
    ),
    "xǁRunnerCoreǁ_on_store_refused": (
        GAP,
        "a store that refuses a call's data for good (not an outage) is rare in these "
        "seeds; the text of the unsaved failure posted then is not checked",
    ),
    "xǁRunnerCoreǁ_store_failed": (GAP, TIMING + "; " + REPORT + " (store_errors)"),
    "xǁRunnerCoreǁ_store_ok": (GAP, TIMING + " (the store retry delay's growth)"),
    "xǁRunnerCoreǁtake_effects": (
        GAP,
        TIMING + ": when reads, marks and renewals go out; serves still end",
    ),
    "xǁRunnerCoreǁnext_wakeup": (GAP, TIMING + ": the loop wakes later or sooner"),
    "xǁRunnerCoreǁ_next_read": (GAP, TIMING + ": Sessions are read later, sooner or again"),
    "xǁRunnerCoreǁ_want_read": (GAP, TIMING + ": Sessions are read later, sooner or again"),
    "xǁRunnerCoreǁ_enter": (GAP, TIMING),
    "xǁRunnerCoreǁ_unwatch": (GAP, TIMING + "; " + MEMORY),
    "xǁRunnerCoreǁ_emit": (GAP, TIMING + ": a store effect waits for the store, or not"),
    "xǁRunnerCoreǁtake_notes": (GAP, NOTES_),
    "xǁRunnerCoreǁ_done": (GAP, NOTES_ + "; " + MEMORY),
    "xǁRunnerCoreǁ_move": (GAP, MEMORY),
    "xǁRunnerCoreǁ_forget": (GAP, MEMORY),
    "xǁRunnerCoreǁ_view": (GAP, MEMORY),
    "xǁRunnerCoreǁ_count": (GAP, REPORT),
    "xǁRunnerCoreǁ_calls_of": (
        GAP,
        LIVENESS + ": its callers (giving back unrun claims, cancelling a Turn's "
        "functions) then find no calls",
    ),
    "xǁRunnerCoreǁ_report_key": (GAP, REPORT),
    "x_classify_refusal": (GAP, _ANY_REPORT),
    "x__worth_retrying": (GAP, _ANY_REPORT),
    "x__message": (GAP, _ANY_REPORT),
    "x__terminal_status": (GAP, "the simulated terminal events always carry their Turn"),
    "x_heeds": (GAP, TIMING + ": an event not heeded is made up for by the next read"),
    "x__is_complete_call": (
        GAP,
        TIMING + ": a call the stream announces is found by the next read anyway",
    ),
    "xǁRunnerCoreǁ_unreachable": (
        GAP,
        TIMING + ": no check that a serve rides out a connection outage shorter than "
        "unreachable_timeout, or gives up right after it",
    ),
    "xǁRunnerCoreǁ_on_session": (GAP, TURN + "; " + MEMORY),
    "xǁRunnerCoreǁ_on_output": (GAP, MARKS),
    "xǁRunnerCoreǁ_consider": (
        GAP,
        TIMING + ": a call left to others or redecided takes a detour; also " + LIVENESS,
    ),
    "xǁRunnerCoreǁ_claim_effect": (
        GAP,
        "a claim's record is checked as it lands (state, attempt, owner, lease, times, "
        "function name, arguments hash, key): what survives changes none of them",
    ),
    "xǁRunnerCoreǁon_store_answer": (
        GAP,
        TIMING + ": a store answer misread costs another look-up or a later read",
    ),
    "xǁRunnerCoreǁ_hold": (
        GAP,
        "a claim answered after its serve ended is run instead of given back, and lease "
        "renewals start late or never: no function outlives its lease in these seeds",
    ),
    "xǁRunnerCoreǁ_decide_existing": (
        GAP,
        TIMING + ": a record misread is re-examined by the store's own rules (which "
        "refuse a wrong mark or take-over) and decided again later; " + REPORT,
    ),
    "x_is_stale": (
        GAP,
        "the simulated owners are not processes: whether an owner is alive or dead is "
        "never known, and the lease's exact instant is not checked",
    ),
    "x_take_over": (GAP, SQL + "; " + DEFENSE),
    "x_renew_lease": (GAP, DEFENSE),
    "x_save_result": (GAP, SQL),
    "x_mark": (GAP, MARKS),
    "x_mark_in_doubt": (GAP, DEFENSE + "; " + SQL),
    "x_release": (GAP, SQL + "; a claim released after a person's rerun is rare here"),
    "x_settle_by_hand": (GAP, SQL + "; " + _RARE_BY_HAND),
    "x_answered_by_hand": (GAP, SQL),
    "xǁRunnerCoreǁ_settled": (
        GAP,
        "when a serve may return: the simulator checks that serves end, not that they "
        "end no earlier than the Session allows (e.g. recover returning mid-pass)",
    ),
}

#: Per function, the scenario that would reach its lines the simulator never runs.
UNREACHED_NOTES: dict[str, str] = {
    "xǁInDoubtDecisionǁrerun": "the 37 seeds include no history whose hook answers rerun() here",
    "xǁInDoubtDecisionǁfail": "the 37 seeds include no history whose hook answers fail() here",
    "xǁRunnerCoreǁstop": STOP,
    "xǁRunnerCoreǁ_cancel_turn": "no seed cancels a Turn while its call is queued or running",
    "xǁRunnerCoreǁ_report_action": (
        "Sessions require other actions (approvals, Environments) in a fifth of the "
        "histories, but no runner meets over 1,024 of one Session, and these seeds meet "
        "no worker without an on_action hook told of one"
    ),
    "xǁRunnerCoreǁ_leave_unknown": UNKNOWN + "; and no call ids that cannot be sent as UTF-8",
    "xǁRunnerCoreǁ_consider": UNKNOWN + "; and no call ids that cannot be sent as UTF-8",
    "xǁRunnerCoreǁ_on_lookup": "no record vanishes before a re-check; " + UNKNOWN,
    "xǁRunnerCoreǁ_hold": UNKNOWN + " (with unknown_functions='fail')",
    "xǁRunnerCoreǁ_decided": (
        "no on_in_doubt hook answers a result or an error text that cannot be sent"
    ),
    "xǁRunnerCoreǁ_in_doubt": (
        "no idempotent call is in doubt max_attempts times in these seeds (the "
        "attempt cap is reached only in longer histories)"
    ),
    "xǁRunnerCoreǁ_decide_existing": (
        "in these seeds no worker meets a record already marked rejected (a result the "
        "server refused, its call announced again), nor a call a person cleared to run "
        "again (calls resolve --rerun) before the policy answered it; " + UNKNOWN
    ),
    "xǁRunnerCoreǁ_unreachable": (
        "the simulated outages answer (502, web pages): none refuses connections "
        "(APIConnectionError) for longer than unreachable_timeout while a serve waits"
    ),
    "xǁRunnerCoreǁ_session_gone": "no Session is deleted (404) while a worker serves it",
    "xǁRunnerCoreǁon_stream_failed": "no Session is deleted (404) while a worker serves it",
    "xǁRunnerCoreǁon_session_read": (
        "no Session is deleted (404) while served; no read answers for a Turn that "
        "run_turn waits on after its end event was lost"
    ),
    "xǁRunnerCoreǁon_store_answer": (
        "no store refuses to keep a late outcome, and no claim is won after its call was forgotten"
    ),
    "xǁRunnerCoreǁ_server_failing": (
        "no request fails with an error retrying cannot help (401, 403, 400) or one "
        "that is not an APIError"
    ),
    "xǁRunnerCoreǁ_on_session": (
        "these seeds meet no Session that requires another action (an approval, an "
        "Environment; a fifth of the histories do)"
    ),
    "xǁRunnerCoreǁon_event": "no message Items are streamed to run_turn's serves in these seeds",
    "xǁRunnerCoreǁbusy": "busy() without a Session is only asked by close(), never here",
    "xǁRunnerCoreǁ_settled": "no recover() pass meets a call it has not settled yet",
    "xǁRunnerCoreǁ_refused_in_turn": "no run_turn waits on a Turn whose result was refused",
    "xǁRunnerCoreǁfinished": "no run_turn waits on a Turn whose result was refused",
    "x__sendable": "no call ids that cannot be sent as UTF-8",
    "x_decode_result": DAMAGED,
    "x_record_to_row": DAMAGED,
    "x_record_from_row": DAMAGED,
    "x__record_from_row": DAMAGED,
    "x_encode_late_outcome": ODD_LATE,
    "x__storable": ODD_LATE,
    "x__storable_leaf": ODD_LATE,
    "x__describe": ODD_LATE,
    "x__clean_text": ODD_LATE,
    "x_validate_lease": "every simulated lease is valid: a bad one is a unit test's job",
    "x_encode_result": "every simulated result is plain JSON: a bad one is a unit test's job",
}

#: Kinds of mutant that change nothing anyone can observe, wherever they are: the
#: ``before -> after`` of the mutant must match the pattern whole.
_EQUIVALENT_RULES: tuple[tuple[str, str], ...] = (
    (
        r'self\._touched\[[\w.]+\] = None -> self\._touched\[[\w.]+\] = ""',
        "_touched is an ordered set (a dict whose values nobody reads; _reads_stale, which "
        "it is copied into, too): any value marks the Session touched",
    ),
    (
        r"call\.(lease_held|save_unanswered) = False -> call\.\1 = None",
        "the flag is only ever read for its truth (if, and, or, not), and None is as false "
        "as False",
    ),
)

_QUOTED = re.compile(r"""(?:[rbuf]*)("[^"]*"|'[^']*')""")


def classify(
    name: str, file: str, line: int, before: str, after: str, reached: bool
) -> tuple[str, str]:
    """(class, reason) of one surviving mutant."""
    short = name.rsplit(".", 1)[-1]
    function = _method(short.partition("__mutmut_")[0])
    if (function, before, after) in _BY_METHOD:
        return _BY_METHOD[function, before, after]
    for pattern, why in _EQUIVALENT_RULES:
        if re.fullmatch(pattern, f"{before} -> {after}"):
            return EQUIVALENT, why
    if line in _log_call_lines(file):
        return GAP, "inside a log call: the simulator turns logging off (a log-reading test's job)"
    if _only_text_changed(before, after):
        return GAP, "message text only: no test reads this wording (a unit test's job)"
    if not reached:
        scenario = _UNREACHED_BY_METHOD.get(function, "no seed runs this line")
        return GAP, f"not reached: {scenario}"
    if function in _FUNCTIONS_BY_METHOD:
        return _FUNCTIONS_BY_METHOD[function]
    return GAP, "reached, yet no check of the simulator notices (not yet analysed)"


def _method(function: str) -> str:
    """A mutated function's name without its class (``xǁRunnerCoreǁ_done`` -> ``_done``):
    notes written before the core was split into classes still find their methods."""
    return function.rsplit("ǁ", 1)[-1]


_BY_METHOD = {(_method(f), b, a): note for (f, b, a), note in MUTANT_NOTES.items()}
_UNREACHED_BY_METHOD = {_method(f): note for f, note in UNREACHED_NOTES.items()}
_FUNCTIONS_BY_METHOD = {_method(f): note for f, note in FUNCTION_NOTES.items()}


def _only_text_changed(before: str, after: str) -> bool:
    """Whether the mutant only rewrote the words of a message (a string with a space)."""
    old, new = _QUOTED.findall(before), _QUOTED.findall(after)
    if len(old) != len(new) or _QUOTED.sub('""', before) != _QUOTED.sub('""', after):
        return False
    changed = [(a, b) for a, b in zip(old, new, strict=True) if a != b]
    return bool(changed) and all(" " in a.strip("\"'") for a, _ in changed)


@functools.cache
def _log_call_lines(file: str) -> frozenset[int]:
    """The lines of ``logger.<level>(...)`` calls in a source file."""
    with open(file) as source:
        tree = ast.parse(source.read())
    lines: set[int] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "logger"
        ):
            lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return frozenset(lines)
