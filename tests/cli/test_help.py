"""Help text a person reads: plain text, with the exit codes documented."""

from __future__ import annotations

import argparse
import re

import pytest

from openagentcore import cli
from openagentcore.cli import build_parser


def _all_parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                found.extend(_all_parsers(child))
    return found


PARSERS = _all_parsers(build_parser())


@pytest.mark.parametrize("parser", PARSERS, ids=[p.prog for p in PARSERS])
def test_help_renders_without_markup(parser: argparse.ArgumentParser) -> None:
    text = parser.format_help()
    assert "``" not in text
    assert not re.search(r":(func|class|meth|data|mod):", text)


@pytest.mark.parametrize("parser", PARSERS[1:], ids=[p.prog for p in PARSERS[1:]])
def test_subcommand_help_points_to_the_exit_codes_instead_of_repeating_them(
    parser: argparse.ArgumentParser,
) -> None:
    text = parser.format_help()
    assert "exit codes:" not in text
    assert text.count("openagentcore --help") == 1
    assert not re.search(rf"^  {cli.EXIT_STORE}\s+\S", text, re.M)


def test_every_exit_code_is_documented_in_the_help() -> None:
    text = build_parser().format_help()
    assert "exit codes:" in text
    codes = {
        name: value
        for name, value in vars(cli).items()
        if name.startswith("EXIT_") and isinstance(value, int)
    }
    assert len(codes) >= 8
    for value in codes.values():
        assert re.search(rf"^  {value}\s+\S", text, re.M), f"exit code {value} not in the help"
