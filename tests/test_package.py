"""Package-level contracts: a side-effect-free import and the downward-only dependency direction."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "raptor"

# Each sub-package may import raptor.<x> only for x in its allowed set (errors is allowed everywhere).
# The direction runs downward: accounting and mechanisms at the bottom, cli at the top.
ALLOWED: dict[str, set[str]] = {
    "accounting": set(),
    "mechanisms": set(),
    "evaluation": set(),
    "shipped": set(),
    "data": {"evaluation", "shipped"},
    "roles": set(),
    "moe": {"roles", "shipped"},
    "per_sample": {"moe", "roles"},
    "pretrain": {"data", "errors", "mechanisms", "moe", "roles", "shipped"},
    "training": {"accounting", "evaluation", "mechanisms", "data", "moe", "roles", "per_sample"},
    "audit": {"accounting", "evaluation", "mechanisms", "data", "moe", "roles", "per_sample", "training"},
    "experiments": {"accounting", "evaluation", "mechanisms", "data", "moe", "roles", "per_sample", "training"},
    "cli": {"pretrain", "shipped", "accounting", "evaluation", "mechanisms", "data", "moe", "roles", "per_sample", "training", "audit", "experiments"},
}


def test_import_raptor_has_no_side_effects():
    code = (
        "import sys, raptor; "
        "heavy = [m for m in ('torch', 'transformers', 'dp_accounting') if m in sys.modules]; "
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"import raptor pulled in heavy modules: {out.stdout.strip()}"
    assert out.stderr == ""


def _raptor_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[0] == "raptor" and len(parts) > 1:
                found.add(parts[1])
    return found


def test_dependencies_run_downward_only():
    violations = []
    for package, allowed in ALLOWED.items():
        for path in sorted((SRC / package).rglob("*.py")):
            for target in _raptor_imports(path) - allowed - {package, "errors"}:
                violations.append(f"{path.relative_to(SRC)} imports raptor.{target}")
    assert violations == [], "\n".join(violations)


def test_every_subpackage_is_covered_by_the_layering_rule():
    packages = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages <= set(ALLOWED), f"add {sorted(packages - set(ALLOWED))} to ALLOWED"
