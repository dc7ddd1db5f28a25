"""The project's own files agree with each other: version, license, changelog, docs links."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import openagentcore
from openagentcore import cli

ROOT = Path(__file__).resolve().parent.parent


def _pyproject() -> dict[str, Any]:
    # tomllib is in the standard library from Python 3.11 on.
    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11")
    parsed: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return parsed


def test_the_version_has_one_source() -> None:
    pyproject = _pyproject()
    assert "version" not in pyproject["project"]
    assert "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["hatch"]["version"]["path"] == "src/openagentcore/__init__.py"
    assert importlib.metadata.version("openagentcore") == openagentcore.__version__


def test_the_license_file_holds_the_declared_license() -> None:
    pyproject = _pyproject()
    assert pyproject["project"]["license"] == "Apache-2.0"
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text
    assert "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_the_changelog_has_the_current_version_and_an_unreleased_section() -> None:
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert headings[0] == "Unreleased"
    assert openagentcore.__version__ in headings


def test_classifiers_name_every_tested_python() -> None:
    pyproject = _pyproject()
    classifiers = pyproject["project"]["classifiers"]
    for minor in ("3.10", "3.11", "3.12", "3.13"):
        assert f"Programming Language :: Python :: {minor}" in classifiers


def test_the_documented_exit_codes_match_the_cli() -> None:
    text = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    table = text.split("## Exit codes", 1)[1]
    documented = {int(code) for code in re.findall(r"^\| (\d+) \|", table, re.M)}
    defined = {value for name, value in vars(cli).items() if name.startswith("EXIT_")}
    assert documented == defined


@pytest.mark.parametrize(
    "page", [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))], ids=lambda p: p.name
)
def test_relative_links_point_to_files_that_exist(page: Path) -> None:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#", 1)[0]).resolve()
        assert path.exists(), f"{page.name} links to {target}, which does not exist"


def test_the_generated_sync_serving_api_is_current() -> None:
    """_serving_sync.py is generated from _serving_async.py: a hand edit, or an edit of
    the source without regenerating, fails here."""
    script = ROOT / "scripts" / "unasync.py"
    done = subprocess.run(
        [sys.executable, str(script), "--check"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
