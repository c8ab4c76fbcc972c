"""The sections of ``raptor train --help``: each train flag sits in exactly one.

The flags are built from the settings' metadata (:mod:`raptor.cli.flags`), each asking
:func:`section` for the group its field names, so that one help page lists the flags section by
section in the order of :data:`SECTIONS`.
"""

from __future__ import annotations

import argparse

#: section title -> its one-line description, in the order ``--help`` shows them
SECTIONS: dict[str, str] = {
    "data": "private, public and dev records",
    "model": "the model, its tokenizer and its output head",
    "method": "what is trained, and how",
    "privacy": "the budget, the clipping and the accountant",
    "optimisation": "the schedule of updates and the optimizer",
    "run": "device, memory, evaluation, checkpoints and output",
}


def section(parser: argparse.ArgumentParser, name: str):
    """The argument group ``name`` (one of :data:`SECTIONS`) of ``parser``, created on first use."""
    if name not in SECTIONS:
        raise ValueError(f"unknown help section {name!r}; one of {', '.join(SECTIONS)}")
    for group in parser._action_groups:
        if group.title == name:
            return group
    return parser.add_argument_group(name, SECTIONS[name])


def add_sections(parser: argparse.ArgumentParser) -> None:
    """Create every section up front, so that ``--help`` lists them in :data:`SECTIONS` order."""
    for name in SECTIONS:
        section(parser, name)
