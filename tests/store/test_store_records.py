"""Owner ids, idempotency keys and argument hashes."""

from __future__ import annotations

import os
import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openagentcore.store import (
    CallKey,
    arguments_hash,
    idempotency_key_for,
    new_owner_id,
    owner_is_dead,
)
from openagentcore.store._records import process_host

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
