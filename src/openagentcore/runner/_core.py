"""The runner's decisions, with no I/O: one record per call, effects out, answers in.

Every call a runner handles has exactly one :class:`Call` here, with an explicit
:class:`Phase` and explicit ownership (``lease_held``). Drivers feed the core what they
observe (stream events, Session reads, store answers, function outcomes, POST
outcomes) together with the current monotonic time, and carry out the effects it
returns. The core never calls the store, the client, a clock, a thread or user code,
nor logs (what it has to say goes out as notes for the observer), so a simulator can
replay any history of faults from one seed (``tests/sim``).

It is made of one layer per concern, each a module: :mod:`._core_base` (the state and
the moves every part makes), :mod:`._housekeeping` (progress marks, lease renewals,
store backoff), :mod:`._serves` (serves and what the server shows of their Sessions)
and :mod:`._calls` (the call machine, moving calls along :mod:`._phases`' table).
:class:`RunnerCore` puts them together and asks each, once per round, what is due.

Order of writes for one call: claim (``started``) before the function runs; save the
result (``completed``) before it is posted; ``submitted`` after a 202; ``applied`` when
its ``function_call_output`` Item appears. A call whose function may have run but left
no saved result is *in doubt* and is never run again unless its function is idempotent
(and then at most ``max_attempts`` times).
"""

from __future__ import annotations

from ._calls import CallMachine, Refusal, classify_refusal
from ._core_base import Call, ContentKey, Mode, Serve
from ._effects import Effect, Lookup, LookupMany, Note
from ._phases import Phase
from ._serves import content_key, heeds

__all__ = [
    "Call",
    "ContentKey",
    "Mode",
    "Phase",
    "Refusal",
    "RunnerCore",
    "Serve",
    "classify_refusal",
    "content_key",
    "heeds",
]


class RunnerCore(CallMachine):
    """Decisions for every call and Session one runner handles: the call machine
    (:mod:`._calls`), the serve tracker (:mod:`._serves`) and the housekeeping
    (:mod:`._housekeeping`) put together, with the clockwork that asks each what is due.

    Not thread-safe: drivers call it from one thread at a time (the sync driver holds a
    lock; the async driver calls it only from its event loop).
    """

    def take_effects(self, now: float) -> list[Effect]:
        """Everything due now; the driver carries each out and feeds back its answer."""
        self._calls_due(now)
        self._reads_due(now)
        self._housekeeping_due(now)
        effects, self._effects = self._effects, []
        return _lookups_together(effects)

    def take_notes(self) -> list[Note]:
        """What happened to calls since the last call (for logs, traces, metrics)."""
        notes, self._notes = self._notes, []
        return notes

    def next_wakeup(self, now: float) -> float:
        """Seconds until something is due without any new input (at most the poll
        interval, which bounds every wait)."""
        due = [now + self.poll_interval]
        self._call_wakeups(due)
        self._read_wakeups(due)
        self._housekeeping_wakeups(due)
        return max(0.0, min(due) - now)


def _lookups_together(effects: list[Effect]) -> list[Effect]:
    """The round's lookups as one :class:`LookupMany`, where the first of them was: one
    read of the store and one answer for all (a restart looks up thousands of calls;
    each alone cost a store statement, a lock and a message)."""
    lookups = [effect for effect in effects if isinstance(effect, Lookup)]
    if len(lookups) < 2:
        return effects
    together: list[Effect] = []
    for effect in effects:
        if not isinstance(effect, Lookup):
            together.append(effect)
        elif effect is lookups[0]:
            together.append(LookupMany(tuple(lookups)))
    return together
