"""API resources: one module per route family, each with a sync and an async class."""

from .agents import Agents, AsyncAgents
from .events import AsyncEvents, Events
from .items import AsyncItems, Items
from .sessions import AsyncSessions, Sessions
from .turns import AsyncTurns, Turns

__all__ = [
    "Agents",
    "AsyncAgents",
    "AsyncEvents",
    "AsyncItems",
    "AsyncSessions",
    "AsyncTurns",
    "Events",
    "Items",
    "Sessions",
    "Turns",
]
