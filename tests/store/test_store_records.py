"""Owner ids, idempotency keys and argument hashes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openagentcore.store import (
    CallKey,
    _records,
    arguments_hash,
    idempotency_key_for,
    new_owner_id,
    owner_is_alive,
    owner_is_dead,
)
from openagentcore.store._records import (
    RAW_HASH_PREFIX,
    owner_closed,
    owner_opened,
    process_host,
)

from ._support import dead_owner

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text() | st.floats(allow_nan=False),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
    max_leaves=20,
)


def test_owner_ids_name_this_host_and_process_and_differ_per_call() -> None:
    first, second = new_owner_id(), new_owner_id()

    host, pid, token = first.rsplit(":", 2)
    assert (host, int(pid)) == (process_host(), os.getpid())
    assert token
    assert first != second


def test_a_live_owner_is_not_dead() -> None:
    assert not owner_is_dead(new_owner_id())
    assert not owner_is_dead(f"{process_host()}:1:init")  # pid 1 always exists


def test_an_exited_process_on_this_host_is_dead() -> None:
    assert owner_is_dead(dead_owner())


def test_a_process_in_another_pid_namespace_is_not_probed() -> None:
    _host, pid, token = dead_owner().rsplit(":", 2)
    other_container = f"{socket.gethostname()}/1:{pid}:{token}"

    assert process_host() != f"{socket.gethostname()}/1"
    assert not owner_is_dead(other_container)


@pytest.mark.skipif(
    not os.path.exists("/proc/sys/kernel/random/boot_id"), reason="needs Linux's boot id"
)
def test_a_machine_with_the_same_name_is_another_host() -> None:
    """Machines cloned from one image share their host name, their first pid namespace
    and even ``/etc/machine-id``: an owner id must tell them apart, or a worker here would
    judge a live worker there dead because its pid does not run here."""
    with open("/proc/sys/kernel/random/boot_id") as boot:
        boot_id = boot.read().strip().replace("-", "")
    assert boot_id[:12] in process_host()
    _host, pid, token = dead_owner().rsplit(":", 2)
    same_name_elsewhere = f"{process_host().rsplit('/', 1)[0]}/000000000000:{pid}:{token}"
    assert not owner_is_dead(same_name_elsewhere)
    assert not owner_is_alive(same_name_elsewhere)


@pytest.mark.parametrize(
    "owner",
    [
        "another-host.example:1:abc",  # cannot be probed from here
        "no-pid-here",
        f"{process_host()}:not-a-pid:abc",
        f"{process_host()}:0:abc",
        f"{process_host()}:-5:abc",
    ],
)
def test_owners_that_cannot_be_checked_are_not_dead(owner: str) -> None:
    assert not owner_is_dead(owner)


@pytest.mark.parametrize(
    "owner",
    [
        "another-host.example:1:123-abc",
        "no-pid-here",
        f"{process_host()}:1:abc",  # pid 1 runs, but an id without a start time proves nothing
        f"{process_host()}:1:1-abc",  # pid 1 did not start then
    ],
)
def test_owners_that_cannot_be_shown_running_are_not_alive(owner: str) -> None:
    assert not owner_is_alive(owner)


def test_an_owner_of_this_process_is_alive_while_its_runner_is_open() -> None:
    owner = new_owner_id()
    assert not owner_is_alive(owner)  # nothing looks after its claims yet
    owner_opened(owner)
    try:
        assert owner_is_alive(owner)
        assert not owner_is_dead(owner)
    finally:
        owner_closed(owner)
    assert not owner_is_alive(owner)
    assert not owner_is_dead(owner)  # closed, not gone: its lease decides


@pytest.fixture
def other_process() -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A process on this host that made an owner id and keeps running."""
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from openagentcore.store import new_owner_id\n"
            "print(new_owner_id(), flush=True)\n"
            "time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    owner = child.stdout.readline().strip()
    yield child, owner
    child.kill()
    child.wait()


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs /proc")
def test_a_running_process_on_this_host_is_alive_until_it_exits(
    other_process: tuple[subprocess.Popen[str], str],
) -> None:
    child, owner = other_process
    assert owner_is_alive(owner)
    assert not owner_is_dead(owner)

    child.send_signal(signal.SIGKILL)
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped
    assert not owner_is_alive(owner)  # a zombie runs nothing
    assert owner_is_dead(owner)
    child.wait()
    assert not owner_is_alive(owner)
    assert owner_is_dead(owner)


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs /proc")
def test_a_process_whose_proc_entry_cannot_be_read_is_neither_dead_nor_alive(
    other_process: tuple[subprocess.Popen[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``/proc`` mounted ``hidepid=2``, another user's processes cannot be read:
    nothing can be told of them, so their leases decide (they were taken for dead)."""
    _child, owner = other_process

    def hidden(path: str, *args: object, **kwargs: object) -> object:
        if path.startswith("/proc/") and not path.startswith("/proc/self"):
            raise PermissionError(13, "Permission denied", path)
        return open(path, *args, **kwargs)

    monkeypatch.setattr(_records, "open", hidden, raising=False)

    assert not owner_is_dead(owner)
    assert not owner_is_alive(owner)


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs /proc")
def test_a_pid_now_naming_a_later_process_is_a_dead_owner(
    other_process: tuple[subprocess.Popen[str], str],
) -> None:
    _child, owner = other_process
    host, pid, token = owner.rsplit(":", 2)
    started, _, random = token.partition("-")
    earlier = f"{host}:{pid}:{int(started) - 1}-{random}"  # the pid's previous process

    assert not owner_is_alive(earlier)
    assert owner_is_dead(earlier)


def test_idempotency_keys_are_stable_short_and_distinct() -> None:
    key = CallKey("sess_1", "turn_1", "call_1")

    value = idempotency_key_for(key)

    assert value == idempotency_key_for(CallKey("sess_1", "turn_1", "call_1"))
    assert value.startswith("oac-")
    assert 1 <= len(value.encode()) <= 128
    assert value != idempotency_key_for(CallKey("sess_1", "turn_1", "call_2"))
    assert value != idempotency_key_for(CallKey("sess_1", "turn_11", "call_"))


@settings(max_examples=40)
@given(arguments=st.dictionaries(st.text(), JSON))
def test_arguments_hash_is_the_same_for_the_json_text_and_the_value(
    arguments: dict[str, object],
) -> None:
    import json

    text = json.dumps(arguments, indent=2)

    assert arguments_hash(text) == arguments_hash(arguments)
    assert arguments_hash(dict(reversed(list(arguments.items())))) == arguments_hash(arguments)


def test_arguments_hash_tells_different_arguments_apart() -> None:
    assert arguments_hash('{"city": "Paris"}') != arguments_hash('{"city": "Lyon"}')
    assert arguments_hash('{"n": 1}') != arguments_hash('{"n": "1"}')
    assert len(arguments_hash({})) == 64


def test_arguments_that_are_not_json_text_hash_as_plain_strings() -> None:
    assert arguments_hash("{not json") == arguments_hash("{not json")
    assert arguments_hash("{not json") != arguments_hash("{not json}")


def test_arguments_hash_refuses_values_json_cannot_express() -> None:
    with pytest.raises(TypeError, match="JSON-serializable"):
        arguments_hash({"when": object()})


# Digests computed with the code before arguments_hash learned to fall back (issue 11):
# records stored by earlier releases must keep comparing equal.
EARLIER_DIGESTS = [
    (
        '{"city": "Paris", "n": 1}',
        "a8750d5c74243dd7d1320e6801a5c8bff740ba0038b3acc1438e7c3483c2d49e",
    ),
    (
        '{"b":[1,2.5,null,true],"a":"naïve ☀"}',
        "0dfd8fba1d96183c98f7c6ba22953fbd3f2c6674e303020a35438960b5c71f12",
    ),
    ("not json", "0963b1df5dbe0fb04b487c75eeab4a64db176a7eb518d20be4728f3221a4ad28"),
    ("", "12ae32cb1ec02d01eda3581b127c1fee3b0dc53572ed6baf239721a03d82e126"),
    ({"x": {"y": [1, "z"]}}, "e77cc2b0ea156ba2671490db77e2b88295a50b90d7f17801bd6b1bac6b8d9d69"),
    ('"\\ud83d\\ude00"', "7a0c50b92434b015545fe93ab723db2d4b2cdd14a441405624a9ce8be29f1d5a"),
    ('{"a": NaN}', "0ce896293703c00486a61416514acc94d2919f4bd42141dedcca7ddfb97ec422"),
    ("1e400", "d0067cad9a63e0813759a2bb841051ca73570c0da2e08e840a8eb45db6a7a010"),
    ('["\\ud800"]', "335ffac769e5b3cec6047f6f464a0d24267493f49d3bc75f0a6411ad9448f003"),
    ("\ud800", "ee4a76500d4d714ca691afe56c1fd9e0a5fbcb42d6c8f8d7178aae4ddb683cf7"),
]


@pytest.mark.parametrize(("arguments", "digest"), EARLIER_DIGESTS)
def test_arguments_hash_keeps_the_digests_of_earlier_releases(
    arguments: object, digest: str
) -> None:
    assert arguments_hash(arguments) == digest


def test_arguments_nested_too_deep_hash_as_raw_text_without_raising() -> None:
    """Issue 11, defect 11: JSON nested ~1,000 deep raised RecursionError, so serve
    crashed on the same call after every restart."""
    depth = 100_000
    text = "[" * depth + "]" * depth
    value: list[object] = []
    for _ in range(depth):
        value = [value]

    digest = arguments_hash(text)
    assert digest.startswith(RAW_HASH_PREFIX)
    assert digest == arguments_hash(text)
    assert digest != arguments_hash("[" * (depth - 1) + "]" * (depth - 1))
    assert arguments_hash(f'{{"a": {text}}}') != digest
    value_digest = arguments_hash(value)
    assert value_digest.startswith(RAW_HASH_PREFIX)
    assert value_digest == arguments_hash(value)


@settings(max_examples=60)
@given(arguments=st.text(st.characters(exclude_categories=())))  # lone surrogates too
def test_arguments_hash_never_raises_on_text(arguments: str) -> None:
    assert len(arguments_hash(arguments)) in (64, 64 + len(RAW_HASH_PREFIX))
