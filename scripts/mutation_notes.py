"""Why each mutant the simulator lets survive survives: equivalent, or a gap in the tests.

``scripts/mutation.py --markdown`` asks :func:`classify` about every survivor. The notes
are written by reading each survivor against the code (docs/mutation.md explains the
classes); rules that hold for whole kinds of mutant come first, then notes per function,
then notes per mutant, which win over both.
"""

from __future__ import annotations

import ast
import functools
import re

EQUIVALENT = "equivalent"
GAP = "gap"

# What the simulator does not look at, named once and cited by the notes below.
REPORT = "[report] no check compares a ServeReport's fields with what happened"
MARKS = "[marks] no check reads progress marks (submitted/applied/rejected) in the store"
TIMING = "[timing] no check counts requests or measures delays, beyond the failing-server rate"
HOOK = "[hook] no check that a call in doubt got the decision of its worker's on_in_doubt hook"
UNKNOWN = "[unknown] every worker serves every function: no call of a function it lacks"
TURN = (
    "[run_turn] what run_turn returns is checked (Turn, status, text), not how: it "
    "falls back to reading what the stream showed, and requests are not counted"
)
MEMORY = "[memory] no check that the core forgets what it no longer needs"
STOP = "[stop] no worker calls stop() while serves or functions are still running"
STAMPS = "[timestamps] no check reads a record's times (updated_at, in_doubt_at, late_at)"
SQL = (
    "[fields] the memory store keeps records as the SQL stores' rows: a field no check "
    "reads (times, settled_by, function name, idempotency key, late outcome) can be lost"
)
DAMAGED = "no damaged row (changed by hand) in the simulated store: tests/store covers them"
ODD_LATE = "no late outcome holds what JSON cannot (NaN, lone surrogates, deep nesting, objects)"
LIVENESS = (
    "[liveness] the final, fault-free worker settles whatever a worker left: no check "
    "that a live worker settles what it could itself"
)
DEFENSE = (
    "[defense] the store refuses what the core never asks for (a live claim of another "
    "worker, a call with a result): the simulator never tests the refusal"
)
NOTES_ = "[notes] the notes for logs, traces and metrics (take_notes) are not checked"

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
_RARE_BY_HAND = (
    "a result given by hand for a call in doubt is rare in these 20 seeds (the world "
    "checks it stands, when one is given)"
)
_PER_NAME = "no simulated function sets max_concurrency: per-function counts are never read"

#: Per mutant (its name without the module), the class and the one-line reason.
MUTANT_NOTES: dict[str, tuple[str, str]] = {
    # CoreBase.__init__
    "xǁCoreBaseǁ__init____mutmut_5": (GAP, UNKNOWN),
    "xǁCoreBaseǁ__init____mutmut_7": (GAP, HOOK),
    "xǁCoreBaseǁ__init____mutmut_9": (
        GAP,
        "no outage of refused connections (APIConnectionError) long enough for a serve "
        "with a deadline-less unreachable_timeout to give up",
    ),
    "xǁCoreBaseǁ__init____mutmut_15": (EQUIVALENT, "serve ids only need to be unique and rising"),
    "xǁCoreBaseǁ__init____mutmut_17": (GAP, NOTES_),
    "xǁCoreBaseǁ__init____mutmut_25": (
        EQUIVALENT,
        "_marks_due is always set by the first queued mark before anything reads it",
    ),
    "xǁCoreBaseǁ__init____mutmut_27": (EQUIVALENT, "None is as false as False here"),
    "xǁCoreBaseǁ__init____mutmut_29": (EQUIVALENT, "None is as false as False here"),
    "xǁCoreBaseǁ__init____mutmut_33": (
        GAP,
        "leases never renewed: no seed runs a function longer than the lease with the "
        "store up (the lease invariant would then fire)",
    ),
    "xǁCoreBaseǁ__init____mutmut_35": (GAP, TIMING + " (first store retry 0.2 s, not 0.1 s)"),
    "xǁCoreBaseǁ__init____mutmut_39": (EQUIVALENT, 'float() reads "-INF" as "-inf"'),
    "xǁServeTrackerǁstop__mutmut_1": (
        EQUIVALENT,
        "the default is never used: the pump, stop()'s only caller, always passes force",
    ),
    "xǁServeTrackerǁattach__mutmut_2": (
        GAP,
        STOP + " (falling serve ids would make stop() also stop serves attached after it)",
    ),
}

MUTANT_NOTES.update(
    {
        "xǁServeTrackerǁon_event__mutmut_2": (
            EQUIVALENT,
            "snapshots_streamed is only compared for equality: any change per snapshot works",
        ),
        "xǁServeTrackerǁon_event__mutmut_4": (
            EQUIVALENT,
            "snapshots_streamed is only compared for equality: any change per snapshot works",
        ),
        "xǁServeTrackerǁon_event__mutmut_12": (GAP, MARKS + ": the output Item only marks applied"),
        "xǁServeTrackerǁon_event__mutmut_16": (GAP, MARKS + ": the output Item only marks applied"),
        "xǁServeTrackerǁon_event__mutmut_18": (GAP, MARKS + ": the output Item only marks applied"),
        "xǁServeTrackerǁon_event__mutmut_84": (
            GAP,
            "the simulator's server runs no subagent Turns",
        ),
        "xǁServeTrackerǁon_session_read__mutmut_3": (EQUIVALENT, "None is as false as False here"),
        "xǁCallMachineǁ_in_doubt__mutmut_20": (EQUIVALENT, _KEY_UNREAD),
        "xǁCallMachineǁ_in_doubt__mutmut_76": (EQUIVALENT, _KEY_UNREAD),
        "xǁCallMachineǁ_in_doubt__mutmut_42": (
            EQUIVALENT,
            "_decided reads attempts only for a rerun; this answer is fail",
        ),
        "xǁCallMachineǁ_in_doubt__mutmut_50": (EQUIVALENT, _ANY_KIND_FAILS),
        "xǁCallMachineǁ_in_doubt__mutmut_54": (EQUIVALENT, _ANY_KIND_FAILS),
        "xǁCallMachineǁ_in_doubt__mutmut_80": (EQUIVALENT, _ANY_KIND_FAILS),
        "xǁCallMachineǁ_in_doubt__mutmut_62": (GAP, HOOK + " (the hooks ignore the arguments)"),
        "xǁCallMachineǁ_on_saved__mutmut_1": (EQUIVALENT, "None is as false as False here"),
        "xǁCallMachineǁ_on_saved__mutmut_3": (
            EQUIVALENT,
            "Call.event is written but never read by anything once the save answered",
        ),
        "xǁCallMachineǁon_posted__mutmut_44": (EQUIVALENT, _OUTCOME_UNREAD),
        "xǁCallMachineǁon_posted__mutmut_48": (EQUIVALENT, _OUTCOME_UNREAD),
        "xǁCallMachineǁon_posted__mutmut_18": (GAP, NOTES_),
        "xǁCallMachineǁon_posted__mutmut_20": (GAP, NOTES_),
        "xǁCallMachineǁon_posted__mutmut_26": (GAP, NOTES_),
        "xǁCallMachineǁon_posted__mutmut_50": (GAP, MARKS),
        "xǁCallMachineǁon_posted__mutmut_96": (GAP, "the error is only logged, and logging is off"),
        "xǁCallMachineǁ_on_refused__mutmut_3": (GAP, _ANY_REPORT),
        "xǁCallMachineǁ_on_refused__mutmut_21": (GAP, _ANY_REPORT),
        "xǁCallMachineǁ_on_refused__mutmut_59": (GAP, _ANY_REPORT),
        "xǁHousekeepingǁ_on_marks_written__mutmut_1": (
            EQUIVALENT,
            "None is as false as False here",
        ),
        "xǁCallMachineǁ_rejected__mutmut_20": (GAP, MARKS),
        "xǁCallMachineǁ_rejected__mutmut_30": (GAP, NOTES_),
        "xǁServeTrackerǁ_on_session__mutmut_21": (
            EQUIVALENT,
            "snapshots is only compared with earlier values of itself: any rising step works",
        ),
        "xǁCallMachineǁ_hold__mutmut_33": (EQUIVALENT, "_enter reads now only for READY"),
        "xǁCallMachineǁ_decide_existing__mutmut_20": (
            EQUIVALENT,
            "_rejected never reads its record argument",
        ),
        "xǁCallMachineǁ_decide_existing__mutmut_22": (EQUIVALENT, "None is as false as False"),
        "xǁCallMachineǁ_decide_existing__mutmut_16": (GAP, NOTES_),
        "xǁCallMachineǁ_consider__mutmut_20": (GAP, REPORT),
        "xǁCallMachineǁ_consider__mutmut_70": (GAP, UNKNOWN),
        "xǁCallMachineǁ_consider__mutmut_72": (GAP, UNKNOWN),
        "xǁCallMachineǁon_store_answer__mutmut_3": (GAP, MARKS),
        "xǁCallMachineǁon_store_answer__mutmut_77": (GAP, LIVENESS),
        "xǁCallMachineǁon_store_answer__mutmut_79": (GAP, LIVENESS),
        "xǁCallMachineǁon_store_answer__mutmut_81": (GAP, LIVENESS),
        "xǁCallMachineǁon_posted__mutmut_14": (GAP, LIVENESS + " (a failed POST seen as sent)"),
        "x__sendable__mutmut_3": (
            EQUIVALENT,
            "an ASCII separator changes nothing: encoding fails iff an id has a lone surrogate",
        ),
        "x__sendable__mutmut_5": (EQUIVALENT, "codec names are case-insensitive"),
        "x_release__mutmut_6": (
            GAP,
            "a released first claim is kept in doubt instead of deleted, and the call is "
            "failed in doubt although no function started: no check that a call failed "
            "in doubt was ever started",
        ),
        "x_take_over__mutmut_9": (GAP, DEFENSE + " (here: taking over a live claim)"),
        "x_take_over__mutmut_43": (
            GAP,
            "attempts are checked against themselves (max_attempts), not against the runs "
            "a call in doubt got",
        ),
        "x_renew_lease__mutmut_4": (
            GAP,
            "own leases are never renewed: no function outlives its lease in these seeds",
        ),
        "x_renew_lease__mutmut_10": (
            GAP,
            "leases are never extended: no function outlives its lease in these seeds",
        ),
        "x_renew_lease__mutmut_6": (
            GAP,
            "renewals fail (logged): no function outlives its lease in these seeds",
        ),
        "x_settle_by_hand__mutmut_27": (GAP, _RARE_BY_HAND),
        "x_settle_by_hand__mutmut_33": (GAP, _RARE_BY_HAND),
        "x_settle_by_hand__mutmut_3": (
            GAP,
            "the simulated person settles only calls in doubt: a live claim settled by "
            "hand is never asked for, so the refusal is not tested",
        ),
        "x_settle_by_hand__mutmut_1": (
            GAP,
            "a person's command refused is taken by the simulator for a race it lost",
        ),
        "xǁCallMachineǁ_start_queued__mutmut_39": (GAP, NOTES_),
        "xǁCallMachineǁ_start_queued__mutmut_41": (GAP, NOTES_),
        "xǁCallMachineǁ_time_out__mutmut_6": (GAP, TIMING + " (at the deadline's exact instant)"),
        "xǁCallMachineǁon_function_done__mutmut_53": (GAP, REPORT),
        "xǁCallMachineǁon_function_done__mutmut_71": (GAP, REPORT),
        "xǁCallMachineǁon_function_done__mutmut_77": (GAP, REPORT),
        "xǁCallMachineǁon_function_done__mutmut_79": (GAP, REPORT),
        "xǁCallMachineǁon_function_done__mutmut_81": (GAP, REPORT),
        "xǁCallMachineǁon_function_done__mutmut_19": (GAP, _LATE),
        "xǁCallMachineǁon_function_done__mutmut_21": (GAP, _LATE),
        "xǁCallMachineǁon_function_done__mutmut_39": (GAP, _LATE),
        "xǁServeTrackerǁon_session_read__mutmut_35": (
            GAP,
            TURN + ": a Turn whose end only a read shows (its end event lost)",
        ),
    }
)

#: Per function (mangled name, e.g. ``xǁServeTrackerǁstop``), for its survivors on lines
#: the simulator runs: the class and the reason or the scenario that would kill them.
FUNCTION_NOTES: dict[str, tuple[str, str]] = {
    "xǁPendingCallǁfrom_item": (
        GAP,
        "a call the stream announces is also listed by the next Session read under the "
        "right key; a stream-only announcement (reads failing) would kill it",
    ),
    "xǁInDoubtDecisionǁresult": (GAP, HOOK),
    "xǁServeǁstreamed_answer": (GAP, TURN),
    "xǁServeTrackerǁattach": (
        GAP,
        TIMING + ": recover's first read is only sooner; the next round reads anyway",
    ),
    "xǁServeTrackerǁdetach": (
        GAP,
        "claims left by an ended serve are released later or lapse; a check that a "
        "detached serve leaves no claim of an unstarted call would kill it (also " + MEMORY + ")",
    ),
    "xǁServeTrackerǁstop": (GAP, STOP),
    "xǁServeTrackerǁexpect_turn": (GAP, TIMING + "; run_turn falls back to listing Turns"),
    "xǁServeTrackerǁstart_turn": (GAP, TURN),
    "xǁServeTrackerǁfinished": (GAP, TURN + "; " + REPORT + "; " + MARKS),
    "xǁServeTrackerǁ_refused_in_turn": (GAP, TURN + "; " + REPORT),
    "xǁServeTrackerǁon_dropped": (GAP, REPORT),
    "xǁServeTrackerǁon_stream_failed": (
        GAP,
        "no stream that cannot be opened again (other than 404) while a serve waits",
    ),
    "xǁServeTrackerǁon_event": (
        GAP,
        "a Turn cancelled while its calls are queued or running, seen on the stream "
        "before any read; calls announced on the stream only (reads failing); terminal "
        "events whose Turn status differs from their type; else " + TURN,
    ),
    "xǁServeTrackerǁ_cancel_turn": (
        GAP,
        "a Turn cancelled while one of its calls is queued or running and another Turn's "
        "call is running: the cancel must reach exactly that Turn's calls",
    ),
    "xǁServeTrackerǁon_session_read": (
        GAP,
        "a failed read followed by a quiet stream: only the retry after poll_interval "
        "moves the serve on; in the simulator something else always reads again",
    ),
    "xǁServeTrackerǁ_server_failing": (
        GAP,
        "reads or POSTs failing with an HTTP error retrying cannot help (401, 403, 400) "
        "or with 5xx for longer than unreachable_timeout: the serve must end with that "
        "error, at once or then; no seed checks which error ends a serve, or when",
    ),
    "xǁServeTrackerǁ_end_serves": (
        GAP,
        "no serve(until='forever') in the simulator: it must outlive an outage",
    ),
    "xǁCallMachineǁ_on_lookup": (
        GAP,
        TIMING + ": a found record ignored is claimed afresh, lost, and decided the same; "
        "a stale one taken for live waits for a later read",
    ),
    "xǁCallMachineǁ_on_marked_in_doubt": (
        GAP,
        "a mark-in-doubt that loses to another worker (changed=False) is rare in these "
        "seeds; no check that a worker renews only leases of calls it runs",
    ),
    "xǁCallMachineǁon_in_doubt_answer": (
        GAP,
        HOOK + "; no hook answers rerun, nor after its call was settled another way",
    ),
    "xǁCallMachineǁ_decided": (GAP, HOOK),
    "xǁCallMachineǁ_start_queued": (
        GAP,
        _PER_NAME + "; and in these seeds no function outlives its timeout (seeds 0-99 "
        "have some: tests/sim/test_sim.py)",
    ),
    "xǁCallMachineǁ_time_out": (
        GAP,
        _PER_NAME + "; no check of who saved a timed-out call's failure",
    ),
    "xǁCallMachineǁon_function_done": (
        GAP,
        _PER_NAME + "; an outcome that arrives after the deadline, before the timekeeper "
        "looked, and a function that exits without a result, are rare in these seeds",
    ),
    "xǁServeTrackerǁ_release_unrun": (
        GAP,
        "a serve that ends holding claims (or store retries) of calls not started: no "
        "check that they are given back at once, or redecided when announced again",
    ),
    "xǁCoreBaseǁ_give_back": (
        GAP,
        "a claim given back is released later or lapses: no check that it is at once",
    ),
    "xǁCallMachineǁ_save": (
        GAP,
        "a save by a worker whose lapsed claim another worker took over: the store "
        "must refuse it; no seed has a worker save after losing its claim",
    ),
    "xǁCallMachineǁ_take_batches": (
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
    "xǁCallMachineǁ_lingering": (GAP, TIMING + ": results go out in more or later POSTs"),
    "xǁCallMachineǁon_posted": (
        GAP,
        TIMING + ": POSTs failing for longer than unreachable_timeout, and a batch of "
        "several refused for one bad result, are rare in these seeds",
    ),
    "xǁCallMachineǁ_on_refused": (GAP, TIMING + ": retry delays and counts of refused POSTs"),
    "xǁCallMachineǁ_rejected": (
        GAP,
        TURN + "; a Turn that waits on a refused result is mostly settled by the "
        "simulated person before any run_turn could return it as waiting",
    ),
    "xǁHousekeepingǁ_queue_mark": (GAP, MARKS),
    "xǁHousekeepingǁ_flush_marks": (GAP, MARKS),
    "xǁHousekeepingǁ_on_marks_written": (GAP, MARKS),
    "xǁHousekeepingǁ_on_renewed": (
        GAP,
        TIMING + ": when leases are renewed; a lost lease is only logged, and the lease "
        "invariant fires only for a function that outlives its lease",
    ),
    "xǁCallMachineǁ_on_store_error": (
        GAP,
        TIMING + ": when a store effect is retried after an outage (it is, later)",
    ),
    "xǁCallMachineǁ_on_store_refused": (
        GAP,
        "a store that refuses a call's data for good (not an outage) is rare in these "
        "seeds; the text of the unsaved failure posted then is not checked",
    ),
    "xǁHousekeepingǁ_store_failed": (GAP, TIMING + "; " + REPORT + " (store_errors)"),
    "xǁHousekeepingǁ_store_ok": (GAP, TIMING + " (the store retry delay's growth)"),
    "xǁRunnerCoreǁtake_effects": (
        GAP,
        TIMING + ": when reads, marks and renewals go out; serves still end",
    ),
    "xǁServeTrackerǁ_reads_due": (GAP, TIMING + ": when reads go out; serves still end"),
    "xǁHousekeepingǁ_housekeeping_due": (
        GAP,
        TIMING + ": when marks and renewals go out; serves still end",
    ),
    "xǁRunnerCoreǁnext_wakeup": (GAP, TIMING + ": the loop wakes later or sooner"),
    "xǁCallMachineǁ_call_wakeups": (GAP, TIMING + ": the loop wakes later or sooner"),
    "xǁServeTrackerǁ_read_wakeups": (GAP, TIMING + ": the loop wakes later or sooner"),
    "xǁHousekeepingǁ_housekeeping_wakeups": (GAP, TIMING + ": the loop wakes later or sooner"),
    "xǁServeTrackerǁ_next_read": (GAP, TIMING + ": Sessions are read later, sooner or again"),
    "xǁCoreBaseǁ_want_read": (GAP, TIMING + ": Sessions are read later, sooner or again"),
    "xǁCoreBaseǁ_enter": (GAP, TIMING),
    "xǁCallMachineǁ_calls_due": (GAP, TIMING + "; " + MEMORY),
    "xǁCoreBaseǁ_emit": (GAP, TIMING + ": a store effect waits for the store, or not"),
    "xǁRunnerCoreǁtake_notes": (GAP, NOTES_),
    "xǁCoreBaseǁ_done": (GAP, NOTES_ + "; " + MEMORY),
    "xǁCoreBaseǁ_move": (GAP, MEMORY),
    "xǁCoreBaseǁ_forget": (GAP, MEMORY),
    "xǁCoreBaseǁ_view": (GAP, MEMORY),
    "xǁCoreBaseǁ_count": (GAP, REPORT),
    "xǁCoreBaseǁ_calls_of": (
        GAP,
        LIVENESS + ": its callers (giving back unrun claims, cancelling a Turn's "
        "functions) then find no calls",
    ),
    "xǁCoreBaseǁ_report_key": (GAP, REPORT),
    "x_classify_refusal": (GAP, _ANY_REPORT),
    "x__worth_retrying": (GAP, _ANY_REPORT),
    "x__message": (GAP, _ANY_REPORT),
    "x__terminal_status": (GAP, "the simulated terminal events always carry their Turn"),
    "x_heeds": (GAP, TIMING + ": an event not heeded is made up for by the next read"),
    "x__is_complete_call": (
        GAP,
        TIMING + ": a call the stream announces is found by the next read anyway",
    ),
    "xǁServeTrackerǁ_unreachable": (
        GAP,
        TIMING + ": no check that a serve rides out a connection outage shorter than "
        "unreachable_timeout, or gives up right after it",
    ),
    "xǁServeTrackerǁ_on_session": (GAP, TURN + "; " + MEMORY),
    "xǁServeTrackerǁ_on_output": (GAP, MARKS),
    "xǁCallMachineǁ_consider": (
        GAP,
        TIMING + ": a call left to others or redecided takes a detour; also " + LIVENESS,
    ),
    "xǁCallMachineǁ_claim_effect": (
        GAP,
        "no check of what a claim writes besides its state, owner and attempts",
    ),
    "xǁCallMachineǁon_store_answer": (
        GAP,
        TIMING + ": a store answer misread costs another look-up or a later read",
    ),
    "xǁCallMachineǁ_hold": (
        GAP,
        "a claim answered after its serve ended is run instead of given back, and lease "
        "renewals start late or never: no function outlives its lease in these seeds",
    ),
    "xǁCallMachineǁ_decide_existing": (
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
    "xǁServeTrackerǁ_settled": (
        GAP,
        "when a serve may return: the simulator checks that serves end, not that they "
        "end no earlier than the Session allows (e.g. recover returning mid-pass)",
    ),
}

#: Per function, the scenario that would reach its lines the simulator never runs.
UNREACHED_NOTES: dict[str, str] = {
    "xǁInDoubtDecisionǁrerun": "no on_in_doubt hook answers rerun()",
    "xǁInDoubtDecisionǁfail": "no on_in_doubt hook answers fail()",
    "xǁServeTrackerǁstop": STOP,
    "xǁServeTrackerǁ_cancel_turn": "no seed cancels a Turn while its call is queued or running",
    "xǁServeTrackerǁ_report_action": (
        "the simulated server asks only for function calls, never another action "
        "(an approval, an Environment) that the runner reports"
    ),
    "xǁCallMachineǁ_leave_unknown": UNKNOWN + "; and no call ids that cannot be sent as UTF-8",
    "xǁCallMachineǁ_consider": UNKNOWN + "; and no call ids that cannot be sent as UTF-8",
    "xǁCallMachineǁ_on_lookup": UNKNOWN + "; and no record that vanishes before a re-check",
    "xǁCallMachineǁ_hold": UNKNOWN + " (with unknown_functions='fail')",
    "xǁCallMachineǁ_decided": (
        "no on_in_doubt hook answers fail(error), or a result that cannot be sent"
    ),
    "xǁCallMachineǁ_in_doubt": (
        "no idempotent call is in doubt max_attempts times in these seeds (the "
        "attempt cap is reached only in longer histories)"
    ),
    "xǁCallMachineǁ_decide_existing": (
        "in these seeds no worker meets a call a person cleared to run again "
        "(calls resolve --rerun) before the policy answered it; " + UNKNOWN
    ),
    "xǁServeTrackerǁ_unreachable": (
        "the simulated outages answer (502, web pages): none refuses connections "
        "(APIConnectionError) for longer than unreachable_timeout while a serve waits"
    ),
    "xǁServeTrackerǁ_session_gone": "no Session is deleted (404) while a worker serves it",
    "xǁServeTrackerǁon_stream_failed": "no Session is deleted (404) while a worker serves it",
    "xǁServeTrackerǁon_session_read": (
        "no Session is deleted (404) while served; no read answers for a Turn that "
        "run_turn waits on after its end event was lost"
    ),
    "xǁCallMachineǁon_store_answer": (
        "no store refuses to keep a late outcome, and no claim is won after its call was forgotten"
    ),
    "xǁServeTrackerǁ_server_failing": (
        "no request fails with an error retrying cannot help (401, 403, 400) or one "
        "that is not an APIError"
    ),
    "xǁServeTrackerǁ_on_session": (
        "the simulated server asks only for function calls, never another action"
    ),
    "xǁServeTrackerǁon_event": "no message Items are streamed to run_turn's serves in these seeds",
    "xǁServeTrackerǁbusy": "busy() without a Session is only asked by close(), never here",
    "xǁServeTrackerǁ_settled": "no recover() pass meets a call it has not settled yet",
    "xǁServeTrackerǁ_refused_in_turn": "no run_turn waits on a Turn whose result was refused",
    "xǁServeTrackerǁfinished": "no run_turn waits on a Turn whose result was refused",
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

_QUOTED = re.compile(r"""(?:[rbuf]*)("[^"]*"|'[^']*')""")


def classify(
    name: str, file: str, line: int, before: str, after: str, reached: bool
) -> tuple[str, str]:
    """(class, reason) of one surviving mutant."""
    short = name.rsplit(".", 1)[-1]
    function = short.partition("__mutmut_")[0]
    if short in MUTANT_NOTES:
        return MUTANT_NOTES[short]
    if line in _log_call_lines(file):
        return GAP, "inside a log call: the simulator turns logging off (a log-reading test's job)"
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


@functools.cache
def _log_call_lines(file: str) -> frozenset[int]:
    """The lines of log calls in a source file: ``logger.<level>(...)``, and the core's
    ``self._say(...)``, whose notes the observer logs."""
    with open(file) as source:
        tree = ast.parse(source.read())
    lines: set[int] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and (node.func.value.id == "logger" or node.func.attr == "_say")
        ):
            lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return frozenset(lines)
