"""raptor.accounting must not import torch (it is used by CLIs and checkpoints without a model).

Of raptor it imports only itself and the stdlib-only leaves raptor.errors, raptor._lazy and
raptor._quiet_log."""

from __future__ import annotations

import subprocess
import sys


def test_import_raptor_accounting_does_not_import_torch():
    code = (
        "import sys, raptor.accounting, raptor.accounting.planning, raptor.accounting.ledger; "
        "import raptor.cli.account, raptor.cli.plan; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    assert out.stdout.strip() == "False", out.stdout + out.stderr


def test_accounting_imports_nothing_of_ours_but_errors():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "src" / "raptor" / "accounting"
    for path in root.glob("*.py"):
        for line in path.read_text().splitlines():
            if line.startswith(("from raptor.", "import raptor.")):
                target = line.split()[1]
                assert target.startswith(("raptor.accounting", "raptor.errors", "raptor._lazy", "raptor._quiet_log")), f"{path.name}: {line}"
