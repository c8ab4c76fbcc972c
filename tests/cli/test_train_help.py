"""``raptor train --help`` lists its flags in sections (issue 25): data, model, method, privacy,
optimisation, run; every flag of the parser is in exactly one section and shown there."""

from __future__ import annotations

import argparse
import re

import pytest

from raptor.cli.main import build_parser, main
from raptor.cli.sections import SECTIONS, section

TITLES = ("data", "model", "method", "privacy", "optimisation", "run")


def _train_parser() -> argparse.ArgumentParser:
    parser = build_parser(["train"])
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["train"]


def _flags_by_section(help_text: str) -> dict[str, set[str]]:
    """Section title -> the option strings ``--help`` shows under it (one option per line, at column 2)."""
    shown: dict[str, set[str]] = {}
    current = None
    for line in help_text.splitlines():
        if re.fullmatch(r"[a-z][\w ()-]*:", line):
            current = line[:-1]
            shown.setdefault(current, set())
        elif current is not None and re.match(r"  -", line):
            head = re.split(r"\s{2,}", line.strip())[0]  # '-h, --help' or '--task TASK'
            shown[current] |= {word.rstrip(",") for word in head.split() if word.startswith("-")}
    return shown


def test_train_help_shows_the_six_sections_in_order(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # one line per option: the parse below does not depend on wrapping
    with pytest.raises(SystemExit) as stop:
        main(["train", "--model", "switch_transformers", "--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    headings = [line[:-1] for line in out.splitlines() if re.fullmatch(r"[a-z][\w ()-]*:", line)]
    assert headings == ["options", *TITLES]  # argparse's own group holds --help only
    assert tuple(SECTIONS) == TITLES


def test_every_train_flag_is_in_one_section_and_shown_there(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    parser = _train_parser()
    groups = {g.title: g for g in parser._action_groups}
    in_sections = {title: {o for a in groups[title]._group_actions for o in a.option_strings} for title in TITLES}
    everything = {o for a in parser._actions for o in a.option_strings} - {"-h", "--help"}
    # no flag outside the six sections (a flag added with parser.add_argument lands in 'options')
    assert set().union(*in_sections.values()) == everything
    assert sum(map(len, in_sections.values())) == len(everything)  # and none in two
    assert {o for a in groups["options"]._group_actions for o in a.option_strings} == {"-h", "--help"}
    shown = _flags_by_section(parser.format_help())
    for title in TITLES:
        assert shown[title] == in_sections[title], title
    assert set().union(*shown.values()) - {"-h", "--help"} == everything  # the help lists exactly the parser's flags
    # the flags of every module that adds train flags sit where they belong
    for flag, title in {"--task": "data", "--prompt-field": "data", "--model": "model", "--recipe": "method",
                        "--lora": "method", "--shared-split": "privacy",
                        "--epsilon": "privacy", "--lr": "optimisation", "--distributed": "run",
                        "--max-new-tokens": "run"}.items():
        assert flag in in_sections[title], (flag, title)


def test_section_reuses_a_group_and_refuses_an_unknown_name():
    parser = argparse.ArgumentParser()
    assert section(parser, "data") is section(parser, "data")
    with pytest.raises(ValueError, match="unknown help section"):
        section(parser, "misc")
