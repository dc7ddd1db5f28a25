"""Secrets in wire models stay out of ``repr()`` and ``str()`` but are still sent."""

from __future__ import annotations

import json
from pathlib import Path

from openagentcore import types

CORPUS = Path(__file__).parent / "corpus"
API_KEY = "sk-test-0123456789abcdef"


def test_model_provider_key_is_sent_but_never_shown() -> None:
    extension = types.AgentsCoreExtension(
        harness="codex",
        model_provider=types.ModelProvider(
            protocol="responses", base_url="https://models.example.com/v1", api_key=API_KEY
        ),
    )
    assert API_KEY not in repr(extension)
    assert API_KEY not in str(extension)
    assert extension.to_wire()["model_provider"]["api_key"] == API_KEY


def test_installation_commands_are_kept_out_of_session_repr() -> None:
    sessions = json.loads((CORPUS / "sessions.json").read_text())
    session = types.Session.model_validate(sessions["self_hosted_with_installation"])
    assert session.x_agents_core is not None
    assert session.x_agents_core.installation is not None
    assert "enr_example" not in repr(session)
    assert "enr_example" in json.dumps(session.to_wire())
