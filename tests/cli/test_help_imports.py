"""Every ``raptor <command> --help`` answers without importing torch or the other heavy libraries
(as ``raptor --help`` does, tests/training/test_run_lifecycle.py): the CLI starts fast."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from raptor.cli.main import COMMANDS

HEAVY = ("torch", "transformers", "dp_accounting", "tokenizers", "datasets")
#: every subcommand, and the sub-subcommands of those that have them
ARGVS = [[name, "--help"] for name in COMMANDS] + [["audit", "mechanism", "--help"], ["audit", "one-run", "--help"]]


@pytest.mark.parametrize("argv", ARGVS, ids=lambda argv: " ".join(argv[:-1]))
def test_command_help_imports_no_heavy_module(argv):
    code = ("import sys\nfrom raptor.cli.main import main\n"
            f"try:\n    main({argv!r})\nexcept SystemExit as stop:\n    assert stop.code == 0, stop.code\n"
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.returncode == 0, out.stderr
    assert "usage: raptor" in out.stdout
    assert out.stdout.strip().splitlines()[-1] == "[]", f"raptor {' '.join(argv)}: {out.stdout.splitlines()[-1]}"
