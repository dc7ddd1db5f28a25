"""Listing Sessions reads an ordered index (kept as Sessions are created), not a sort of
every Session for each page: the pages must be what the sort gave, for both orders,
each cursor, the Agent filter and deleted Sessions."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from openagentcore import Client, NotFoundError
from openagentcore.local import LocalCore


@pytest.fixture(scope="module")
def core() -> Iterator[LocalCore]:
    with LocalCore() as started:
        yield started


def test_pages_follow_creation_order_with_cursors_filters_and_deletions(core: LocalCore) -> None:
    rng = random.Random(7)
    with Client(api_key=core.api_key, base_url=core.base_url) as client:
        agents = [client.agents.create(name=f"a{n}", model="scripted").id for n in range(2)]
        sessions = [
            client.sessions.create(agent_id=rng.choice(agents), input=f"s{n}") for n in range(60)
        ]
        deleted = {s.id for s in rng.sample(sessions, 12)}
        for session_id in deleted:
            client.sessions.delete(session_id)
        by_creation = sorted(sessions, key=lambda s: (s.created_at, s.id))
        for agent_id in (None, *agents):
            expected = [
                s.id
                for s in by_creation
                if s.id not in deleted and (agent_id is None or s.agent.id == agent_id)
            ]
            for order in ("asc", "desc"):
                wanted = expected if order == "asc" else expected[::-1]
                filters = {} if agent_id is None else {"agent_id": agent_id}
                listed = [s.id for s in client.sessions.list(order=order, limit=7, **filters)]
                assert listed == wanted, (agent_id, order)
                middle = wanted[len(wanted) // 2]
                after = [s.id for s in client.sessions.list(order=order, after=middle, **filters)]
                assert after == wanted[len(wanted) // 2 + 1 :], (agent_id, order)
        # A deleted Session, or one of another Agent, is no cursor for the listing.
        with pytest.raises(NotFoundError):
            list(client.sessions.list(after=next(iter(deleted))))
        other = next(s for s in sessions if s.agent.id == agents[1] and s.id not in deleted)
        with pytest.raises(NotFoundError):
            list(client.sessions.list(after=other.id, agent_id=agents[0]))
