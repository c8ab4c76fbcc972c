"""``raptor train --help`` lists its flags in sections (data, model, method, privacy,
optimisation, run), every flag of the parser in exactly one section and shown there; at most 30
first-class flags, built from the settings' metadata, so that a new field or a new method row is
one edit."""

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
    for flag, title in {"--task": "data", "--max-length": "data", "--model": "model", "--recipe": "method",
                        "--lora": "model", "--objective": "method", "--epsilon": "privacy", "--lr": "optimisation",
                        "--set": "run", "--output-dir": "run"}.items():
        assert flag in in_sections[title], (flag, title)


def test_section_reuses_a_group_and_refuses_an_unknown_name():
    parser = argparse.ArgumentParser()
    assert section(parser, "data") is section(parser, "data")
    with pytest.raises(ValueError, match="unknown help section"):
        section(parser, "misc")


def test_help_lists_at_most_30_flags():
    everything = {o for a in _train_parser()._actions for o in a.option_strings} - {"-h", "--help"}
    assert len(everything) <= 30, sorted(everything)


def test_settings_flags_are_named_after_their_fields():
    """A command setting's flag sets the namespace attribute of its field's name (what the command reads)."""
    from raptor.cli.set_fields import leaf_fields
    from raptor.cli.settings import SETTINGS

    for cls in SETTINGS.values():
        for name, (f, _) in leaf_fields(cls).items():
            if f.metadata.get("flag"):
                assert f.metadata["flag"] == "--" + name.replace("_", "-"), name


def test_a_throwaway_field_is_a_flag_by_its_declaration_alone():
    """A config field made in this test, with a flag in its metadata, is in --help, in its section,
    and parsed into the run's config; a second one without a flag is reached by --set."""
    import dataclasses

    from raptor.cli.flags import add_train_flags, resolve_train_args
    from raptor.cli.sections import add_sections
    from raptor.training.config import TrainConfig, setting

    @dataclasses.dataclass(frozen=True)
    class Throwaway(TrainConfig):
        knob: float = setting(1.5, flag="--knob", section="optimisation", help="a throwaway knob")
        quiet_knob: int = setting(3, help="reached by --set only")

    parser = argparse.ArgumentParser()
    add_sections(parser)
    add_train_flags(parser, Throwaway)
    assert "a throwaway knob (default 1.5)" in " ".join(parser.format_help().split())
    groups = {g.title: {o for a in g._group_actions for o in a.option_strings} for g in parser._action_groups}
    assert "--knob" in groups["optimisation"] and "--quiet-knob" not in str(groups)
    args = parser.parse_args(["--model", "switch_transformers", "--knob", "2.5", "--set", "quiet_knob=7"])
    config = resolve_train_args(args, Throwaway)
    assert isinstance(config, Throwaway) and (config.knob, config.quiet_knob) == (2.5, 7)
    assert resolve_train_args(parser.parse_args(["--model", "switch_transformers"]), Throwaway).knob == 1.5


def test_a_throwaway_method_row_is_a_method_of_the_cli(monkeypatch):
    """A row added to the method table (in this test) is a --method choice and a valid config."""
    from raptor.cli.train import config_from_args
    from raptor.training import methods

    monkeypatch.setitem(methods.METHOD_SPECS, "throwaway", methods.METHOD_SPECS["dpsgd"])
    parser = build_parser(["train"])
    args = parser.parse_args(["train", "--model", "switch_transformers", "--method", "throwaway"])
    assert config_from_args(args).method == "throwaway"
    assert "throwaway" in parser.format_help() or "throwaway" in _train_parser().format_help()
