"""Every ``--flag`` that raptor's source names (messages, help, docstrings) is a flag of some raptor
command: a flag moved behind ``raptor train --set`` or renamed leaves no message pointing at it."""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

from raptor.cli.main import build_parser

SRC = Path(__file__).resolve().parents[2] / "src" / "raptor"
#: flags of other programs that raptor's text names (torchrun, pip, pytest, the experiments' scripts)
OTHERS = {"--standalone", "--nproc-per-node", "--nnodes", "--node-rank", "--rdzv-endpoint", "--rdzv-backend",
          "--master-addr", "--master-port", "--upgrade", "--index-url", "--extra-index-url", "--no-deps",
          "--version", "--help", "--set", "--find-links", "--no-index", "--porcelain", "--untracked-files",
          "--shard"}  # git; experiments/run_grid.py


def _raptor_flags() -> set[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = set()
    for p in sub.choices.values():
        out |= {o for a in p._actions for o in a.option_strings}
        for a in p._actions:  # nested subcommands (raptor audit KIND)
            if isinstance(a, argparse._SubParsersAction):
                out |= {o for q in a.choices.values() for b in q._actions for o in b.option_strings}
    return out


def _mentions() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for file in sorted(SRC.rglob("*.py")):
        tree = ast.parse(file.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*", node.value):
                    found.setdefault(flag, []).append(f"{file.relative_to(SRC)}:{node.lineno}")
    return found


def test_every_flag_named_in_the_source_exists():
    known = _raptor_flags() | OTHERS
    stale = {flag: where[:3] for flag, where in _mentions().items() if flag not in known}
    assert not stale, f"flags named in src that no raptor command has: {stale}"
