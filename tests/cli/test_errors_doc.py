"""docs/ERRORS.md is checked against the tests: every case of the bad-input tables has its row, in
the section of the command it runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import test_bad_inputs
import test_errors_every_command

DOC = (Path(__file__).resolve().parents[2] / "docs" / "ERRORS.md").read_text(encoding="utf-8")
COMMANDS = ("train", "predict", "demo", "inspect", "plan", "account", "check", "pretrain", "upcycle", "audit", "bench")


def _sections() -> dict[str, set[str]]:
    """command -> the bad-input names of its table."""
    out: dict[str, set[str]] = {}
    current = None
    for line in DOC.splitlines():
        m = re.match(r"^## `raptor (\w+)`", line)
        if line.startswith("## "):
            current = m.group(1) if m else None
        elif current and line.startswith("| ") and not line.startswith("| bad input"):
            out.setdefault(current, set()).add(line.split(" | ")[0][2:].strip())
    return out


def _command(case) -> str:
    head = case.argv[0] if case.argv else ""
    return head if head in COMMANDS else "train"


CASES = [*test_bad_inputs.CASES, *test_errors_every_command.CASES]


def test_every_command_of_the_tables_has_a_section():
    assert {_command(c) for c in CASES} <= set(_sections())


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_case_has_its_row_under_its_command(case):
    assert case.name in _sections()[_command(case)], \
        f"docs/ERRORS.md: no row {case.name!r} under raptor {_command(case)}"
