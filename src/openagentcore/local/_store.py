"""The emulator's state, and its optional SQLite file.

State lives in memory as plain records. With a state file every commit writes the
changed records in one SQLite transaction, so stopping and restarting the server keeps
Agents, Sessions, Turns, Items, pending calls and stored results. Events are not kept:
the stream is live only.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import sqlite3
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, Union

__all__ = [
    "AgentRecord",
    "CallRecord",
    "ItemRecord",
    "SessionRecord",
    "Store",
    "TurnRecord",
    "new_id",
    "now",
]


_last_stamp = 0
_stamp_lock = threading.Lock()


def new_id(prefix: str) -> str:
    """A unique ID that sorts after every ID made before it, also across restarts.

    Lists order by creation time, then ID, and timestamps have one-second precision,
    so IDs made in the same second must sort in creation order.
    """
    global _last_stamp
    with _stamp_lock:
        _last_stamp = max(_last_stamp + 1, time.time_ns() // 1000)
        stamp = _last_stamp
    return f"{prefix}_{stamp:014x}{uuid.uuid4().hex[:18]}"


def now() -> int:
    return int(time.time())


@dataclass
class AgentRecord:
    id: str
    created_at: int
    updated_at: int
    #: The saved configuration in wire shape (model, name, instructions, tools, ...).
    config: dict[str, Any]
    deleted: bool = False


@dataclass
class SessionRecord:
    id: str
    created_at: int
    last_active_at: int
    metadata: dict[str, str]
    #: The frozen agent snapshot in wire shape.
    agent: dict[str, Any]
    environment: dict[str, Any]
    vault_ids: list[str]
    #: The frozen ``x_agents_core.harness``; None is the deployment default.
    harness: str | None = None
    deleted: bool = False
    turn_ids: list[str] = field(default_factory=list)
    #: Input ``Idempotency-Key`` -> canonical JSON of the batch it admitted.
    input_keys: dict[str, str] = field(default_factory=dict)


@dataclass
class TurnRecord:
    id: str
    session_id: str
    agent_id: str
    #: Position among the Session's root Turns; the scenario is indexed by it.
    index: int
    created_at: int
    status: str = "queued"
    started_at: int | None = None
    completed_at: int | None = None
    usage: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    cancel_requested: bool = False
    #: Model steps finished so far.
    step: int = 0
    #: Calls of the current step, in issue order.
    step_call_ids: list[str] = field(default_factory=list)
    #: Every call of the Turn, in issue order, for the model's answer.
    call_ids: list[str] = field(default_factory=list)
    output_count: int = 0
    input_characters: int = 0

    @property
    def ended(self) -> bool:
        return self.status in ("completed", "failed", "cancelled")

    def to_wire(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "agent.session.turn",
            "agent_id": self.agent_id,
            "session_id": self.session_id,
            "status": self.status,
            "created_at": self.created_at,
            "started_at": self.started_at,
            "completed_at": self.completed_at,
            "error": self.error,
            "usage": self.usage,
            "subagent_id": None,
        }


@dataclass
class ItemRecord:
    id: str
    session_id: str
    turn_id: str
    #: Global observation order; lists sort by it.
    seq: int
    output_index: int | None
    #: The Item in wire shape (``id`` and ``turn_id`` included).
    body: dict[str, Any]


@dataclass
class CallRecord:
    """A function call the model issued, and the result submitted for it."""

    call_id: str
    session_id: str
    turn_id: str
    item_id: str
    name: str
    arguments: dict[str, Any]
    #: The ``tool_result`` event exactly as submitted, field presence included.
    #: Whether the call accepts results yet (see ``Faults.pending_call_delay``).
    registered: bool = False
    result: dict[str, Any] | None = None
    applied: bool = False


Record = Union[AgentRecord, SessionRecord, TurnRecord, ItemRecord, CallRecord]  # noqa: UP007
_R = TypeVar("_R", AgentRecord, SessionRecord, TurnRecord, ItemRecord, CallRecord)

_KINDS: dict[str, type[Any]] = {
    "agent": AgentRecord,
    "session": SessionRecord,
    "turn": TurnRecord,
    "item": ItemRecord,
    "call": CallRecord,
}
_KIND_OF: dict[type[Any], str] = {cls: kind for kind, cls in _KINDS.items()}


class Store:
    """In-memory records plus an optional SQLite mirror."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.agents: dict[str, AgentRecord] = {}
        self.sessions: dict[str, SessionRecord] = {}
        self.turns: dict[str, TurnRecord] = {}
        self.items: dict[str, ItemRecord] = {}
        self.calls: dict[str, CallRecord] = {}
        #: Session creation ``Idempotency-Key`` -> (request fingerprint, Session ID).
        self.creation_keys: dict[str, tuple[str, str]] = {}
        #: Sessions in listing order, ``(created_at, id)``, all and per Agent id: a page
        #: reads the Sessions it shows, not a sort of every Session ever created.
        self.session_order: list[tuple[int, str]] = []
        self.session_order_by_agent: dict[str, list[tuple[int, str]]] = {}
        self._seq = 0
        self._dirty: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        if path is not None:
            self._db = sqlite3.connect(str(path), check_same_thread=False)
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS records ("
                "kind TEXT NOT NULL, id TEXT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (kind, id))"
            )
            self._load()

    def next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def add(self, record: _R) -> _R:
        table: dict[str, Any] = self._table(record)
        key = _record_key(record)
        if isinstance(record, SessionRecord) and key not in table:
            self._index_session(record)
        table[key] = record
        self.save(record)
        return record

    def _index_session(self, session: SessionRecord) -> None:
        entry = (session.created_at, session.id)
        bisect.insort(self.session_order, entry)
        agent_id = session.agent.get("id")
        if agent_id is not None:
            bisect.insort(self.session_order_by_agent.setdefault(agent_id, []), entry)

    def save(self, *records: Record) -> None:
        """Mark records changed; :meth:`commit` writes them."""
        for record in records:
            self._dirty[(_KIND_OF[type(record)], _record_key(record))] = record

    def add_creation_key(self, key: str, fingerprint: str, session_id: str) -> None:
        self.creation_keys[key] = (fingerprint, session_id)
        if self._db is not None:
            self._dirty[("creation_key", key)] = _CreationKey(key, fingerprint, session_id)

    def commit(self) -> None:
        dirty, self._dirty = self._dirty, {}
        if self._db is None or not dirty:
            return
        rows = [
            (kind, key, json.dumps(dataclasses.asdict(record)))
            for (kind, key), record in dirty.items()
        ]
        with self._lock, self._db:
            self._db.executemany(
                "INSERT OR REPLACE INTO records (kind, id, body) VALUES (?, ?, ?)", rows
            )

    def close(self) -> None:
        self.commit()
        if self._db is not None:
            with self._lock:
                self._db.close()
            self._db = None

    def _table(self, record: Record) -> dict[str, Any]:
        tables: dict[type[Any], dict[str, Any]] = {
            AgentRecord: self.agents,
            SessionRecord: self.sessions,
            TurnRecord: self.turns,
            ItemRecord: self.items,
            CallRecord: self.calls,
        }
        return tables[type(record)]

    def _load(self) -> None:
        assert self._db is not None
        for kind, body in self._db.execute("SELECT kind, body FROM records"):
            data = json.loads(body)
            if kind == "creation_key":
                self.creation_keys[data["key"]] = (data["fingerprint"], data["session_id"])
                continue
            record = _KINDS[kind](**data)
            if isinstance(record, SessionRecord):
                self._index_session(record)
            self._table(record)[_record_key(record)] = record
            if isinstance(record, ItemRecord):
                self._seq = max(self._seq, record.seq)


@dataclass
class _CreationKey:
    key: str
    fingerprint: str
    session_id: str


_KIND_OF[_CreationKey] = "creation_key"


def _record_key(record: Any) -> str:
    if isinstance(record, CallRecord):
        return record.call_id
    if isinstance(record, _CreationKey):
        return record.key
    return str(record.id)
