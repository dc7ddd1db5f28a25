"""The SDK's loggers, and ``OPENAGENTCORE_LOG`` to turn them on without code.

Libraries leave logging configuration to the application. The one exception, read once
when :mod:`openagentcore` is imported, is an environment variable for the person
running the program: ``OPENAGENTCORE_LOG=debug|info|warning`` sets the level of the
SDK's loggers and, if the root logger has no handler yet, adds one printing to stderr.
Any other value is named in one warning, rather than silently giving no logs.
"""

from __future__ import annotations

import logging
import os

__all__ = ["LOG_ENV", "LOGGER_NAMES", "log_level", "setup_logging"]

LOG_ENV = "OPENAGENTCORE_LOG"

#: Every logger the SDK writes to (each a child of ``openagentcore``), and what it says.
LOGGER_NAMES: dict[str, str] = {
    "openagentcore": "HTTP requests, retries and connection problems of the client",
    "openagentcore.runner": "the runner: functions that raised, bad arguments, calls in "
    "doubt, an unreachable server or store, reconnects",
    "openagentcore.runner.calls": "one INFO line when each call starts and when it settles",
}

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING}
_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def log_level(value: str | None = None) -> int | None:
    """The level ``OPENAGENTCORE_LOG`` (or ``value``) asks for; ``None`` when unset or
    not one of the accepted values."""
    if value is None:
        value = os.environ.get(LOG_ENV, "")
    return _LEVELS.get(value.strip().lower())


def setup_logging(value: str | None = None) -> None:
    """Apply ``OPENAGENTCORE_LOG`` (or ``value``); an unset or empty one leaves logging
    alone, and any other value than the accepted ones is warned about once."""
    if value is None:
        value = os.environ.get(LOG_ENV, "")
    level = log_level(value)
    if level is None:
        if value.strip():
            # One line on stderr (Python's last-resort handler) unless the application
            # already configured logging.
            logging.getLogger("openagentcore").warning(
                "%s=%r is not one of %s; the SDK logs nothing more than without it",
                LOG_ENV,
                value,
                ", ".join(_LEVELS),
            )
        return
    if not logging.getLogger().handlers:
        logging.basicConfig(format=_FORMAT)
    logging.getLogger("openagentcore").setLevel(level)
    if level == logging.DEBUG:
        # httpx logs each request at DEBUG too: useful when the SDK's own lines are not
        # enough to tell what went over the wire.
        logging.getLogger("httpx").setLevel(logging.DEBUG)
