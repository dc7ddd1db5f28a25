"""Random sequences of store operations checked against a small model of the rules."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from openagentcore.store import (
    CallKey,
    CallState,
    InvalidTransitionError,
    MemoryResultStore,
    ResultStore,
    SQLiteResultStore,
    UnknownCallError,
)

from ._support import FakeClock

LEASE = 10.0
KEYS = st.sampled_from([CallKey("s", "t", "a"), CallKey("s", "t", "b"), CallKey("z", "t", "c")])
# Owners on other hosts: only their leases can make them stale.
OWNERS = st.sampled_from(["far-1:10:x", "far-2:20:y", "far-3:30:z"])
MARKABLE = st.sampled_from(
    [
        CallState.IN_DOUBT,
        CallState.SUBMITTED,
        CallState.APPLIED,
        CallState.REJECTED,
        CallState.ABANDONED,
    ]
)
S = CallState


@dataclass(frozen=True)
class ModelCall:
    state: CallState
    result: dict[str, Any] | None
    attempts: int
    owner: str | None
    lease_expires_at: float | None
    updated_at: float


class StoreMachine(RuleBasedStateMachine):
    """Subclasses choose the store; the model is a dict of what each call should look like."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.model: dict[CallKey, ModelCall] = {}
        self.store = self.open_store()

    def open_store(self) -> ResultStore:
        raise NotImplementedError

    def teardown(self) -> None:
        self.store.close()

    @rule(seconds=st.sampled_from([0.5, LEASE / 2, LEASE, 3 * LEASE]))
    def time_passes(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @rule(key=KEYS, owner=OWNERS)
    def claim(self, key: CallKey, owner: str) -> None:
        outcome = self.store.claim(
            key, function_name="f", arguments_hash="h", owner=owner, lease_seconds=LEASE
        )
        assert outcome.won == (key not in self.model)
        call = self.model.get(key)
        assert outcome.stale == (call is not None and self._stale(call))
        if outcome.won:
            now = self.clock.now
            self.model[key] = ModelCall(S.STARTED, None, 1, owner, now + LEASE, now)

    @rule(key=KEYS, owner=OWNERS, off_by=st.sampled_from([0, 0, 1, -1]))
    def take_over(self, key: CallKey, owner: str, off_by: int) -> None:
        call = self.model.get(key)
        if call is None:
            with pytest.raises(UnknownCallError):
                self.store.take_over(key, owner=owner, lease_seconds=LEASE, expected_attempts=1)
            return
        expected = call.attempts + off_by
        outcome = self.store.take_over(
            key, owner=owner, lease_seconds=LEASE, expected_attempts=expected
        )
        now = self.clock.now
        lease_gone = call.lease_expires_at is None or call.lease_expires_at <= now
        may = (
            call.result is None
            and expected == call.attempts
            and (
                call.state is S.IN_DOUBT
                or (call.state is S.STARTED and (lease_gone or call.owner == owner))
            )
        )
        assert outcome.won == may
        if may:
            self.model[key] = replace(
                call,
                state=S.STARTED,
                attempts=call.attempts + 1,
                owner=owner,
                lease_expires_at=now + LEASE,
                updated_at=now,
            )

    def _stale(self, call: ModelCall) -> bool:
        return (
            call.state is S.STARTED
            and call.lease_expires_at is not None
            and call.lease_expires_at <= self.clock.now
        )

    @rule(key=KEYS, owner=OWNERS, off_by=st.sampled_from([0, 0, 1, -1]))
    def mark_in_doubt(self, key: CallKey, owner: str, off_by: int) -> None:
        call = self.model.get(key)
        if call is None:
            with pytest.raises(UnknownCallError):
                self.store.mark_in_doubt(key, owner=owner, expected_attempts=1)
            return
        expected = call.attempts + off_by
        changed = self.store.mark_in_doubt(key, owner=owner, expected_attempts=expected)
        may = (
            call.state is S.STARTED
            and expected == call.attempts
            and (call.owner == owner or self._stale(call))
        )
        assert changed == may
        if may:
            self.model[key] = replace(call, state=S.IN_DOUBT, updated_at=self.clock.now)

    @rule(key=KEYS, owner=OWNERS)
    def release(self, key: CallKey, owner: str) -> None:
        call = self.model.get(key)
        released = self.store.release(key, owner=owner)
        may = call is not None and call.state is S.STARTED and call.owner == owner
        assert released == may
        if call is None or not may:
            return
        if call.attempts == 1:
            del self.model[key]
        else:
            self.model[key] = replace(
                call,
                state=S.IN_DOUBT,
                attempts=call.attempts - 1,
                lease_expires_at=None,
                updated_at=self.clock.now,
            )

    @rule(key=KEYS, owner=OWNERS)
    def renew_lease(self, key: CallKey, owner: str) -> None:
        call = self.model.get(key)
        renewed = self.store.renew_lease(key, owner=owner, lease_seconds=LEASE)
        may = call is not None and call.owner == owner and call.state is S.STARTED
        assert renewed == may
        if call is not None and may:
            now = self.clock.now
            self.model[key] = replace(call, lease_expires_at=now + LEASE, updated_at=now)

    @rule(key=KEYS, owner=st.none() | OWNERS, value=st.integers(0, 3))
    def save_result(self, key: CallKey, owner: str | None, value: int) -> None:
        call = self.model.get(key)
        event = {"type": "agent.session.input.tool_result", "output": value, "extra": None}
        if call is None:
            with pytest.raises(UnknownCallError):
                self.store.save_result(key, event, owner=owner)
            return
        record = self.store.save_result(key, event, owner=owner)
        if call.result is None and call.state in (S.STARTED, S.IN_DOUBT):
            call = replace(
                call,
                state=S.COMPLETED,
                result=event,
                owner=owner or call.owner,
                lease_expires_at=None,
                updated_at=self.clock.now,
            )
            self.model[key] = call
        assert (record.state, record.result) == (call.state, call.result)

    @rule(key=KEYS, state=MARKABLE)
    def mark(self, key: CallKey, state: CallState) -> None:
        call = self.model.get(key)
        if call is None:
            with pytest.raises(UnknownCallError):
                self.store.mark(key, state)
            return
        # Settled calls never change; a refused result may still be settled.
        frozen = call.state in (S.APPLIED, S.ABANDONED) or (
            call.state is S.REJECTED and state not in (S.APPLIED, S.ABANDONED)
        )
        if frozen:
            allowed = False
        elif state is S.IN_DOUBT:
            allowed = call.state is S.STARTED
        elif state is S.ABANDONED:
            allowed = True
        else:
            if call.result is None:
                with pytest.raises(InvalidTransitionError):
                    self.store.mark(key, state)
                return
            allowed = (call.state, state) in {
                (S.COMPLETED, S.SUBMITTED),
                (S.COMPLETED, S.APPLIED),
                (S.SUBMITTED, S.APPLIED),
                (S.COMPLETED, S.REJECTED),
                (S.SUBMITTED, S.REJECTED),
                (S.REJECTED, S.APPLIED),
            }
        self.store.mark(key, state)
        if allowed:
            self.model[key] = replace(call, state=state, updated_at=self.clock.now)

    @rule(older_than=st.sampled_from([0.0, LEASE, 4 * LEASE]))
    def prune(self, older_than: float) -> None:
        cutoff = self.clock.now - older_than
        doomed = [
            key
            for key, call in self.model.items()
            # Finished: settled, or submitted (the server has the result).
            if call.state in (S.APPLIED, S.ABANDONED, S.SUBMITTED) and call.updated_at < cutoff
        ]
        assert self.store.prune(older_than=older_than) == len(doomed)
        for key in doomed:
            del self.model[key]

    @invariant()
    def store_matches_model(self) -> None:
        assert {record.key for record in self.store.find()} == set(self.model)
        for key, call in self.model.items():
            record = self.store.get(key)
            assert record is not None
            assert (
                ModelCall(
                    record.state,
                    record.result,
                    record.attempts,
                    record.owner,
                    record.lease_expires_at,
                    record.updated_at,
                )
                == call
            )
            assert self.store.is_stale(record) == (
                call.state is S.STARTED
                and call.lease_expires_at is not None
                and call.lease_expires_at <= self.clock.now
            )


class MemoryMachine(StoreMachine):
    def open_store(self) -> ResultStore:
        return MemoryResultStore(clock=self.clock)


class SQLiteMachine(StoreMachine):
    def open_store(self) -> ResultStore:
        self.directory = tempfile.mkdtemp(prefix="oac-store-")
        return SQLiteResultStore(Path(self.directory) / "calls.db", clock=self.clock)

    def teardown(self) -> None:
        super().teardown()
        shutil.rmtree(self.directory, ignore_errors=True)


FAST = settings(max_examples=60, stateful_step_count=25, deadline=None)
TestMemoryStateMachine = FAST(MemoryMachine).TestCase
TestSQLiteStateMachine = settings(FAST, max_examples=30)(SQLiteMachine).TestCase
