"""What the result store remembers about one function call, and the ids that name it."""

from __future__ import annotations

import enum
import functools
import hashlib
import json
import os
import secrets
import socket
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = [
    "FINISHED",
    "MANUAL_RERUN",
    "PRUNABLE_STATES",
    "RAW_HASH_PREFIX",
    "SETTLED_STATES",
    "CallKey",
    "CallRecord",
    "CallState",
    "Claim",
    "arguments_hash",
    "cleared_to_rerun",
    "idempotency_key_for",
    "new_owner_id",
    "owner_is_alive",
    "owner_is_dead",
    "process_liveness",
    "Liveness",
]


class CallState(str, enum.Enum):
    """Where a call is on its way from "claimed" to "the server has the result"."""

    #: Claimed by an owner that is (or was) running the function.
    STARTED = "started"
    #: The result is saved but not yet sent.
    COMPLETED = "completed"
    #: The result was sent at least once; the server may not have confirmed it.
    SUBMITTED = "submitted"
    #: The server accepted the result. Nothing is left to do.
    APPLIED = "applied"
    #: The function started but its owner vanished before saving a result, so nobody
    #: knows whether the effect happened. A policy decides: re-run or abandon.
    IN_DOUBT = "in_doubt"
    #: Given up on deliberately. Nothing is left to do.
    ABANDONED = "abandoned"
    #: The server refused the saved result (a 400 or 422). The call may still be pending
    #: on the server, so the record is kept (never pruned) until someone settles it: a
    #: later ``APPLIED`` (the server took a result after all) or ``ABANDONED``.
    REJECTED = "rejected"


#: States in which the store has nothing left to do for a call.
SETTLED_STATES: frozenset[CallState] = frozenset({CallState.APPLIED, CallState.ABANDONED})
#: States whose old records ``prune`` deletes: the settled ones, and ``SUBMITTED``: the
#: server accepted the result, so the call will never be pending again, even if the
#: runner never saw it applied (its stream dropped, or it stopped first).
PRUNABLE_STATES: frozenset[CallState] = SETTLED_STATES | {CallState.SUBMITTED}


#: ``settled_by`` of a call marked in doubt whose run finished after all and saved its
#: own result first (the worker that marked it had not answered yet).
FINISHED = "finished"
#: ``settled_by`` of a call in doubt that a person cleared to run again
#: (``openagentcore calls resolve --rerun``): the next runner serving its function runs
#: it, whether or not the function is idempotent.
MANUAL_RERUN = "manual:rerun"


@dataclass(frozen=True, slots=True)
class CallKey:
    """The identity of one function call: the server never reuses the triple."""

    session_id: str
    turn_id: str
    call_id: str


@dataclass(frozen=True, slots=True)
class CallRecord:
    """A snapshot of one call as stored. Stores hand out copies: editing one changes nothing."""

    key: CallKey
    function_name: str
    arguments_hash: str
    state: CallState
    #: The exact ``agent.session.input.tool_result`` event to send, kept as first saved so
    #: that a resubmission with the same idempotency key carries the same body.
    result: dict[str, Any] | None
    idempotency_key: str
    #: How many times an owner claimed the call to run it (1 after the first claim).
    attempts: int
    owner: str | None
    #: Unix seconds after which a ``STARTED`` call with no result may be taken over.
    lease_expires_at: float | None
    created_at: float
    updated_at: float
    #: Unix seconds when the call was first found in doubt (started, no saved result, its
    #: owner gone), kept after it is settled.
    in_doubt_at: float | None = None
    #: How a call in doubt was settled: ``rerun`` (run again), ``failed`` or ``result``
    #: (a runner's policy), ``finished`` (the run thought lost saved its own result
    #: first), ``manual:output``, ``manual:failed`` or ``manual:rerun``
    #: (``calls resolve``; a call marked ``manual:rerun`` stays ``IN_DOUBT`` until a
    #: runner serving its function runs it again).
    settled_by: str | None = None
    #: What the function produced after its ``timeout`` had failed the call, or after
    #: another worker had settled it (marked in doubt and answered): the
    #: ``tool_result`` event it would have sent (a failed one if it raised), never sent.
    #: Kept for the operator; ``result`` stays what the model got.
    late_outcome: dict[str, Any] | None = None
    #: Unix seconds when the late outcome was kept.
    late_at: float | None = None
    #: Each decision a person took on the call (``calls resolve``), oldest first, so a
    #: later one (or a runner) never erases it: ``at`` (the store's time),
    #: ``settled_by`` (the decision), and the ``state``, ``attempts`` and ``owner`` (who
    #: ran the attempt decided on) the record had just before.
    history: tuple[dict[str, Any], ...] = ()

    def has_result(self) -> bool:
        """Whether a result was saved, so it can be (re)submitted without running again."""
        return self.result is not None


def cleared_to_rerun(record: CallRecord) -> bool:
    """Whether a person cleared this call in doubt to run again (``calls resolve
    --rerun``) and no runner has taken it over since."""
    return record.state is CallState.IN_DOUBT and record.settled_by == MANUAL_RERUN


@dataclass(frozen=True, slots=True)
class Claim:
    """The answer to a claim: ``won`` means this owner now holds the call and must run it."""

    won: bool
    record: CallRecord
    #: For a lost claim: whether the stored record was stale (see ``ResultStore.is_stale``)
    #: by the store's clock when the claim read it, so the caller need not ask again.
    stale: bool = False


def new_owner_id() -> str:
    """A fresh owner id ``host:pid:token``; the token tells apart restarts that reuse a pid.

    ``host`` is :func:`process_host`: containers and machines that share a host name but
    not their process ids never judge each other's processes dead. On Linux the token
    starts with the process's start time (``ticks-random``), so a process on this host
    can tell that the owner is still running.
    """
    started = _start_time(os.getpid())
    token = secrets.token_hex(6)
    return f"{process_host()}:{os.getpid()}:{token if started is None else f'{started}-{token}'}"


@functools.lru_cache(maxsize=1)
def process_host() -> str:
    """Where this process's pid means something: the host name, plus (on Linux) the pid
    namespace and this boot of the machine (``name/4026531836/1961caf3c3e9``).

    Machines cloned from one image share their host name, their first pid namespace and
    even ``/etc/machine-id``; the boot id is random per boot. After a reboot, the owners
    of the last boot count as another host's: their leases decide.
    """
    name = socket.gethostname()
    try:
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return name
    try:
        with open("/proc/sys/kernel/random/boot_id") as boot:
            boot_id = boot.read().strip().replace("-", "")[:12]
    except OSError:
        return f"{name}/{namespace}"
    return f"{name}/{namespace}/{boot_id}"


#: The owners of this process's runners that are open: a claim one holds is being
#: looked after, however old its lease looks.
_OPEN_OWNERS: set[str] = set()


def owner_opened(owner: str) -> None:
    """``owner`` (a runner of this process) now looks after its claims."""
    _OPEN_OWNERS.add(owner)


def owner_closed(owner: str) -> None:
    """``owner``'s runner is closed: its claims are left to their leases."""
    _OPEN_OWNERS.discard(owner)


#: The largest pid any supported system hands out (Linux's PID_MAX_LIMIT, 2**22).
_PID_LIMIT = 4_194_304


def _local_pid(owner: str) -> tuple[int, str] | None:
    """The pid and token of an owner on this host (and pid namespace), else ``None``."""
    parts = owner.rsplit(":", 2)
    if len(parts) != 3 or parts[0] != process_host():
        return None
    try:
        pid = int(parts[1])
    except ValueError:
        return None
    if not 0 < pid <= _PID_LIMIT or sys.platform == "win32":
        # No process has such a pid (and os.kill cannot take it); signal 0 is
        # CTRL_C_EVENT on Windows, so a probe would interrupt the process.
        return None
    return pid, parts[2]


def _stat(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/<pid>/stat`` from the state on (``state ppid ...``), or
    ``None`` when they cannot be read: no such process, no ``/proc``, or another user's
    process under ``hidepid``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: count after its end.
    fields = text[text.rfind(b")") + 2 :].split()
    return fields if len(fields) >= 20 else None


def _start_time(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot), or ``None`` if it is not
    running (a zombie has exited) or the system does not say."""
    fields = _stat(pid)
    return None if fields is None else _running_since(fields)


def _running_since(fields: list[bytes]) -> str | None:
    """The start time in ``/proc/<pid>/stat`` fields, or ``None`` for a process that
    has exited."""
    return None if fields[0] in _EXITED else fields[19].decode("ascii", "replace")


#: Process states of ``/proc/<pid>/stat`` that mean the process has exited.
_EXITED = (b"Z", b"X")


def _started_at(token: str) -> str | None:
    started, dash, _ = token.partition("-")
    return started if dash else None


def owner_is_alive(owner: str) -> bool:
    """Whether ``owner`` is known to be running: an open runner of this process, or a
    process on this host that is the very one that made the id (same pid, same start
    time). A claim such an owner holds is never taken for abandoned, whatever the clocks
    say (a clock step or a paused process makes every lease look expired).

    An owner elsewhere, or an id without a start time, is never reported alive: only its
    lease says so.
    """
    local = _local_pid(owner)
    if local is None:
        return False
    pid, token = local
    if pid == os.getpid():
        return owner in _OPEN_OWNERS
    started = _started_at(token)
    return started is not None and _start_time(pid) == started


#: What a store may know of an owner beyond its lease: ``True`` when it is known to be
#: running (its claims are never stale, whatever the clocks say), ``False`` when it is
#: known to be gone (its claims are stale before their leases end), ``None`` when nothing
#: is known and the lease decides. Stores take one (``liveness=``); the store rules
#: (:mod:`._rules`) ask only it, never the process table.
Liveness = Callable[[str], bool | None]


def process_liveness(owner: str) -> bool | None:
    """The default :data:`Liveness`: what this host's process table and this process's
    open runners say (:func:`owner_is_alive`, :func:`owner_is_dead`)."""
    if owner_is_alive(owner):
        return True
    if owner_is_dead(owner):
        return False
    return None


def owner_is_dead(owner: str) -> bool:
    """Whether ``owner`` is known to be gone: it ran on this host (and pid namespace) and
    its process has exited (or its pid now names a process that started later).

    An owner elsewhere, an id :func:`new_owner_id` did not make, or a process this one
    may not look at, is never reported dead: only its lease can expire.
    """
    local = _local_pid(owner)
    if local is None:
        return False
    pid, token = local
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # the process exists but belongs to another user
    fields = _stat(pid)
    if fields is None:
        return False  # cannot be read (hidepid): nothing can be told
    running_since = _running_since(fields)
    started = _started_at(token)
    return running_since is None or (started is not None and running_since != started)


def idempotency_key_for(key: CallKey) -> str:
    """The ``Idempotency-Key`` for submitting this call's result: the same on every retry,
    on every host, and 68 bytes long (the server accepts up to 128).

    Each id is length-prefixed before hashing, so no two calls share a key whatever
    their ids hold. A claim stores the key in the call's record, and every submission
    sends the stored one: a result saved by a version that derived keys differently
    (earlier versions joined the ids with U+001F) is resubmitted under the key it was
    first sent with.
    """
    digest = hashlib.sha256(b"openagentcore result\0")
    for part in (key.session_id, key.turn_id, key.call_id):
        # surrogatepass: ids a server sent with a lone surrogate still get a key (the
        # runner never answers such a call, but nothing that names it may raise).
        encoded = part.encode("utf-8", "surrogatepass")
        digest.update(b"%d:" % len(encoded) + encoded)
    return "oac-" + digest.hexdigest()


def answer_idempotency_key(record: CallRecord, answer: str) -> str:
    """The ``Idempotency-Key`` of a person's answer to a call whose saved result the
    server refused: the call's stored key plus a digest of the answer, so that no key
    names two bodies and sending the same answer again is a retry (86 bytes)."""
    digest = hashlib.sha256(answer.encode("utf-8", errors="surrogatepass")).hexdigest()
    return f"{record.idempotency_key}-m{digest[:16]}"


#: Prefix of the digest of arguments nested too deep for the JSON parser: those are hashed
#: as the raw text, so they never match a canonical digest.
RAW_HASH_PREFIX = "raw:"


def arguments_hash(arguments: object) -> str:
    """A digest of the call's arguments that ignores key order and whitespace.

    ``arguments`` may be the JSON string the server sends or the decoded value; both hash
    alike. A string that is not valid JSON is hashed as a plain string (lone surrogates
    included), and NaN and Infinity as JavaScript spells them. Arguments come from the
    model, so no string makes this raise: text nested too deep for the JSON parser gets a
    digest of its raw bytes instead, prefixed with :data:`RAW_HASH_PREFIX`.
    """
    raw = arguments if isinstance(arguments, str) else None
    if raw is not None:
        try:
            arguments = json.loads(raw)
        except RecursionError:
            return _raw_digest(raw)
        except ValueError:
            pass
    try:
        canonical = json.dumps(
            arguments,
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
        )
    except TypeError as exc:
        raise _not_json(exc) from None
    except RecursionError:
        if raw is None:
            # A decoded value too deep for json.dumps: encode it without recursion.
            raw = "".join(_iter_json_tokens(arguments))
        return _raw_digest(raw)
    return _sha256(canonical)


def _not_json(exc: TypeError) -> TypeError:
    return TypeError(
        f"arguments must be JSON-serializable to be hashed: {exc}. "
        "Pass the call's arguments as received from the server."
    )


def _sha256(text: str) -> str:
    # surrogatepass: a lone surrogate in the arguments still hashes, and distinctly.
    return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()


def _raw_digest(text: str) -> str:
    return RAW_HASH_PREFIX + _sha256(text)


def _iter_json_tokens(value: object) -> Iterator[str]:
    """Canonical JSON text for ``value`` without recursion, for values nested deeper
    than ``json.dumps`` goes."""
    stack: list[object] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _Token):
            yield item.text
        elif isinstance(item, dict):
            parts: list[object] = [_Token("{")]
            for index, name in enumerate(sorted(item, key=str)):
                if index:
                    parts.append(_Token(","))
                parts += [_Token(json.dumps(str(name), ensure_ascii=False) + ":"), item[name]]
            stack += reversed([*parts, _Token("}")])
        elif isinstance(item, (list, tuple)):
            parts = [_Token("[")]
            for index, element in enumerate(item):
                if index:
                    parts.append(_Token(","))
                parts.append(element)
            stack += reversed([*parts, _Token("]")])
        else:
            try:
                yield json.dumps(item, ensure_ascii=False)
            except TypeError as exc:
                raise _not_json(exc) from None


@dataclass(frozen=True, slots=True)
class _Token:
    text: str
