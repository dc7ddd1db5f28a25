"""Errors raised by the result stores."""

from __future__ import annotations

from .._errors import OpenAgentCoreError

__all__ = [
    "InvalidTransitionError",
    "StoreClosedError",
    "StoreCorruptError",
    "StoreError",
    "StoreKeyError",
    "StoreSchemaError",
    "StoreUnavailableError",
    "UnknownCallError",
]


class StoreError(OpenAgentCoreError):
    """Root of the errors a result store raises on purpose."""


class UnknownCallError(StoreError, LookupError):
    """The store has no record of the call; claim it before changing it."""


class InvalidTransitionError(StoreError, ValueError):
    """The requested state change is never valid, e.g. marking a call submitted before
    its result is saved."""


class StoreUnavailableError(StoreError):
    """The database could not be reached or stayed locked past the timeout.

    Usually nothing was changed, and retrying is safe. If the connection broke during the
    commit, the change may have landed: a retried ``claim`` then loses to the row its first
    attempt wrote, and shows this owner in ``record.owner``.
    """


class StoreKeyError(StoreError, ValueError):
    """The database cannot store this call's ids or function name as given (for
    example PostgreSQL refuses text with a NUL character, and ids too long for its
    index). Permanent: retrying cannot help. When the value came from the model, answer
    the call with a failed result instead of running it."""


class StoreCorruptError(StoreError):
    """The store's file or a row in it is damaged; the message names the file.

    Permanent: move the file aside (it may help a recovery tool) and start a new one.
    """


class StoreSchemaError(StoreError):
    """The store's tables were created by a newer openagentcore than this one."""


class StoreClosedError(StoreError):
    """The store was closed; open a new one."""
