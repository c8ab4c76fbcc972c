"""docs/ARCHITECTURE.md describes the code as it is: every dotted raptor name it quotes resolves, its
layering table is tests/test_package.py's rule, and it has no changelog phrasing. The same holds
for every dotted raptor name in src/, docs/ and the README, and none of them dates a thing by the
issue that brought it."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

from test_package import ALLOWED, CLI_FORBIDDEN

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
#: a dotted name starting at ``raptor`` (not inside a path, a file name such as ``.raptor.lock``, or a
#: format tag such as ``raptor.privacy_ledger/1``)
DOTTED = re.compile(r"(?<![\w./-])raptor(?:\.[A-Za-z_][A-Za-z0-9_]*)+(?![\w/])")


def _tree_texts() -> dict[str, str]:
    files = [*sorted((ROOT / "src" / "raptor").rglob("*.py")), *sorted((ROOT / "docs").glob("*.md")),
             ROOT / "README.md"]
    return {str(f.relative_to(ROOT)): f.read_text(encoding="utf-8") for f in files}


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        try:
            for name in parts[cut:]:
                obj = getattr(obj, name)
        except AttributeError:
            return False
        return True
    return False


def test_every_dotted_raptor_name_in_the_doc_resolves():
    names = sorted(set(re.findall(r"\braptor(?:\.[A-Za-z_][A-Za-z0-9_]*)+", DOC)))
    assert len(names) > 20
    missing = [n for n in names if not _resolves(n)]
    assert missing == [], f"docs/ARCHITECTURE.md names what the code does not have: {missing}"


def test_the_layering_table_is_the_tested_rule():
    rows = {}
    for line in DOC.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0].startswith("`") and "may import" not in cells[1]:
            packages = re.findall(r"`([a-z_]+)`", cells[0])
            allowed = set(re.findall(r"`([a-z_]+)`", cells[1].split("never")[0])) - {"errors"}
            rows.update({p: allowed for p in packages})
    assert rows == ALLOWED | {"pretrain": ALLOWED["pretrain"] - {"errors"}}
    never = [line for line in DOC.splitlines() if line.startswith("| `cli` |")][0].split("never")[1]
    assert set(re.findall(r"`([a-z_]+)`", never)) == CLI_FORBIDDEN


def test_no_changelog_phrasing():
    found = re.findall(r"\b(now|is gone|moved|no longer|renamed|used to)\b", DOC)
    assert found == [], f"say what the code is, not what changed: {found}"


def test_every_dotted_raptor_name_in_src_docs_and_readme_resolves():
    where: dict[str, set[str]] = {}
    for path, text in _tree_texts().items():
        for name in DOTTED.findall(text):
            where.setdefault(name, set()).add(path)
    assert len(where) > 200
    missing = {n: sorted(p) for n, p in sorted(where.items()) if not _resolves(n)}
    assert missing == {}, f"names the code does not have: {missing}"


def test_the_scan_sees_a_stale_name():
    assert DOTTED.findall("sparse upcycling (:mod:`raptor.moe.upcycle`) and OUTPUT_DIR/.raptor.lock") == \
        ["raptor.moe.upcycle"]
    assert not _resolves("raptor.moe.upcycle") and _resolves("raptor.pretrain.upcycle.UpcycleSpec")

