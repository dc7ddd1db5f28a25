"""The documentation's Python samples run, and its prose names only what the reference
documents.

Every fenced ```python sample in README.md and docs/*.md is one of these, decided by an
HTML comment on the last non-blank line before its fence (invisible on the site and on
GitHub; keep a blank line between it and the fence so Markdown keeps them apart):

- no comment: a program. It runs as ``python -c`` in a fresh process and an empty
  directory, with ``OPENAGENTCORE_BASE_URL`` and ``OPENAGENTCORE_API_KEY`` naming a fresh
  local emulator, and must exit with status 0. A program that defines ``test_*``
  functions is a test module: pytest runs it in a fresh process, with the plugin's
  ``oac_*`` fixtures, and its tests must pass.
- ``<!-- sample: fragment -->``: a piece of a larger program, using names the page
  defines elsewhere or that stand for the reader's code (``runner``, ``session_id``,
  ``payments``). It is only checked to be valid Python.
- ``<!-- sample: postgres -->``: a program that needs PostgreSQL. It is skipped unless
  ``OPENAGENTCORE_TEST_POSTGRES_DSN`` is set; then it runs as a program with its
  ``postgresql://`` URL replaced by that DSN.

A sample that fails because the page is wrong is fixed in the page, never marked.
"""

from __future__ import annotations

import builtins
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pydantic_core
import pytest
import yaml

import openagentcore
from openagentcore.local import LocalCore

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: Seconds a sample may take; they take one or two.
SAMPLE_TIMEOUT = 120

_FENCE = re.compile(r"^(?P<indent> *)```python\n(?P<code>.*?)^(?P=indent)```", re.S | re.M)
_MARKER = re.compile(r"<!--\s*sample:\s*(?P<kind>[a-z]+)\s*-->")
_KINDS = ("program", "fragment", "postgres")


@dataclass(frozen=True)
class Sample:
    page: Path
    line: int
    kind: str
    code: str

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def _samples() -> list[Sample]:
    found = []
    for page in PAGES:
        text = page.read_text()
        for match in _FENCE.finditer(text):
            before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
            marker = _MARKER.search(before)
            kind = marker.group("kind") if marker else "program"
            indent = len(match.group("indent"))
            code = "".join(line[indent:] for line in match.group("code").splitlines(True))
            line = text[: match.start()].count("\n") + 1
            found.append(Sample(page, line, kind, code))
    return found


SAMPLES = _samples()


def _of_kind(kind: str) -> list[Sample]:
    return [sample for sample in SAMPLES if sample.kind == kind]


@pytest.fixture
def core() -> Iterator[LocalCore]:
    with LocalCore() as running:
        yield running


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> None:
    done = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=SAMPLE_TIMEOUT
    )
    assert done.returncode == 0, f"exit status {done.returncode}\n{done.stdout}\n{done.stderr}"


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, **extra}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    return env


def _defines_tests(code: str) -> bool:
    return re.search(r"^def test_", code, re.M) is not None


def test_every_sample_is_of_a_known_kind() -> None:
    unknown = [sample.id for sample in SAMPLES if sample.kind not in _KINDS]
    assert not unknown, f"unknown <!-- sample: ... --> markers at {unknown}; use one of {_KINDS}"


@pytest.mark.parametrize("sample", _of_kind("fragment"), ids=lambda sample: sample.id)
def test_fragments_are_valid_python(sample: Sample) -> None:
    compile(sample.code, sample.id, "exec")


@pytest.mark.parametrize("sample", _of_kind("program"), ids=lambda sample: sample.id)
def test_programs_run_against_the_emulator(sample: Sample, core: LocalCore, tmp_path: Path) -> None:
    env = _env(OPENAGENTCORE_BASE_URL=core.base_url, OPENAGENTCORE_API_KEY=core.api_key)
    if _defines_tests(sample.code):
        (tmp_path / "test_sample.py").write_text(sample.code)
        _run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_sample.py"],
            tmp_path,
            env,
        )
    else:
        _run([sys.executable, "-c", sample.code], tmp_path, env)


@pytest.mark.parametrize("sample", _of_kind("postgres"), ids=lambda sample: sample.id)
def test_postgres_programs_run_against_the_test_database(sample: Sample, tmp_path: Path) -> None:
    dsn = os.environ.get("OPENAGENTCORE_TEST_POSTGRES_DSN")
    if not dsn:
        pytest.skip("set OPENAGENTCORE_TEST_POSTGRES_DSN to run the PostgreSQL samples")
    code, replaced = re.subn(r"postgresql://[^\"']*", dsn, sample.code, count=1)
    assert replaced, f"{sample.id} is marked postgres but names no postgresql:// URL"
    _run([sys.executable, "-c", code], tmp_path, _env())


def test_the_conventions_are_used_on_real_samples() -> None:
    """The kinds above each mark a real sample, so none of the tests is vacuous."""
    assert {sample.kind for sample in SAMPLES} == set(_KINDS)


# Exceptions named in the prose


_EXCEPTION_NAME = re.compile(r"`(?P<name>[A-Z][A-Za-z]*(?:Error|Timeout|Exception))\b")


def _named_exceptions() -> set[str]:
    """Exception classes the prose names bare (``asyncio.CancelledError`` is dotted, so
    not ours), without Python's own, httpx's and pydantic's."""
    names = set()
    for page in PAGES:
        for match in _EXCEPTION_NAME.finditer(page.read_text()):
            name = match.group("name")
            if not any(hasattr(module, name) for module in (builtins, httpx, pydantic_core)):
                names.add(name)
    return names


def _documented_names() -> set[str]:
    """Names the API reference renders: ``::: openagentcore.X`` and ``members:`` lists."""
    names = set()
    for page in (ROOT / "docs" / "reference").glob("*.md"):
        text = page.read_text()
        names.update(re.findall(r"^::: [\w.]*\.(\w+)\s*$", text, re.M))
        names.update(re.findall(r"^ {8}- (\w+)\s*$", text, re.M))
    return names


def test_every_exception_the_docs_name_is_exported_and_in_the_reference() -> None:
    named = _named_exceptions()
    assert {"ServeTimeout", "StoreCorruptError", "StoreKeyError"} <= named
    missing_export = sorted(n for n in named if n not in openagentcore.__all__)
    missing_reference = sorted(named - _documented_names())
    assert not missing_export, f"not exported from openagentcore: {missing_export}"
    assert not missing_reference, f"not in docs/reference/*.md: {missing_reference}"
    for name in named:
        assert issubclass(getattr(openagentcore, name), BaseException)


# The site's configuration


class _MkDocsLoader(yaml.SafeLoader):
    """Reads mkdocs.yml, whose ``!!python/name:`` tags name Python objects."""


def _python_name(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> str:
    return suffix


_MkDocsLoader.add_multi_constructor("tag:yaml.org,2002:python/name:", _python_name)


def _markdown_extension(config: dict[str, Any], name: str) -> Any:
    for entry in config["markdown_extensions"]:
        if entry == name:
            return {}
        if isinstance(entry, dict) and name in entry:
            return entry[name] or {}
    raise AssertionError(f"mkdocs.yml does not enable {name}")


def test_mermaid_fences_are_drawn_as_diagrams_not_shown_as_code() -> None:
    """Material draws a ```mermaid fence only when superfences passes it through as
    ``<pre class="mermaid">``; without the custom fence the site shows its source."""
    assert any("```mermaid" in page.read_text() for page in PAGES)
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=_MkDocsLoader)
    fences = _markdown_extension(config, "pymdownx.superfences").get("custom_fences", [])
    assert {
        "name": "mermaid",
        "class": "mermaid",
        "format": "pymdownx.superfences.fence_code_format",
    } in fences
