"""Package-level contracts: a side-effect-free import and the downward-only dependency direction."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "raptor"

# Top-level leaf modules that every sub-package may import: each imports only the standard library
# and no other raptor module (tested below), so importing one can never point a dependency upward.
# errors: the exception types; _lazy: the PEP 562 lazy-export helper of the package __init__s;
# _hashing: the streamed SHA-256 of a file; _quiet_log: a per-thread logger filter for one call;
# _flock: the exclusive lock on a file that names its holder (output-dir lock, grid cell claims).
LEAVES = {"errors", "_lazy", "_hashing", "_quiet_log", "_flock"}

# Each sub-package may import raptor.<x> only for x in its allowed set (or a LEAF).
# The direction runs downward: accounting and mechanisms at the bottom, cli at the top.
ALLOWED: dict[str, set[str]] = {
    "accounting": set(),
    "mechanisms": set(),
    "evaluation": set(),
    "shipped": set(),
    # data reads records and loads models and tokenizers (raptor.data.model_source): it builds moe models
    # from an explicit generator (mechanisms)
    "data": {"evaluation", "shipped", "moe", "mechanisms"},
    "roles": set(),
    "moe": {"roles", "shipped"},
    "per_sample": {"moe", "roles"},
    "pretrain": {"data", "errors", "mechanisms", "moe", "roles", "shipped"},
    # shipped: a bottom leaf (data imports it too); training names the shipped models for the CLI
    "training": {"accounting", "evaluation", "mechanisms", "data", "moe", "roles", "per_sample", "shipped"},
    # recipes.py (a module): functions returning a TrainConfig
    "recipes": {"training"},
    "audit": {"accounting", "evaluation", "mechanisms", "data", "moe", "roles", "per_sample", "training", "recipes"},
    "analysis": {"accounting", "evaluation", "mechanisms", "data", "moe", "roles", "per_sample", "training"},
    # adapters for users' own loops and Hugging Face's Trainer, over training's plan, engine and ledger;
    # audit for the oracle check of a run's own engine (PrivacyEngine.check, as raptor check)
    "integrations": {"accounting", "evaluation", "mechanisms", "data", "moe", "roles", "per_sample", "training",
                     "audit"},
    # the thin CLI (DESIGN.md section 2): it reaches the engine (per_sample, moe, mechanisms, roles) only
    # through training, so that every run goes through one library function
    "cli": {"training", "data", "accounting", "audit", "pretrain", "recipes"},
}
#: what the CLI must never import, whatever ALLOWED says (issue 25)
CLI_FORBIDDEN = {"per_sample", "moe", "mechanisms", "roles", "shipped", "evaluation"}
#: the steps of a run's assembly: only the library's run_fine_tune calls them, never a CLI module
ASSEMBLY = {"build_trainer", "assemble_run", "start_run", "continue_run", "fingerprint"}


def test_import_raptor_has_no_side_effects():
    code = (
        "import sys, raptor; "
        "heavy = [m for m in ('torch', 'transformers', 'dp_accounting') if m in sys.modules]; "
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
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
        paths = sorted((SRC / package).rglob("*.py")) or [SRC / f"{package}.py"]
        for path in paths:
            for target in _raptor_imports(path) - allowed - {package} - LEAVES:
                violations.append(f"{path.relative_to(SRC)} imports raptor.{target}")
    assert violations == [], "\n".join(violations)


def test_the_cli_never_reaches_the_engine_directly():
    assert not ALLOWED["cli"] & CLI_FORBIDDEN
    found = [f"{p.relative_to(SRC)} imports raptor.{t}" for p in sorted((SRC / "cli").rglob("*.py"))
             for t in _raptor_imports(p) & CLI_FORBIDDEN]
    assert found == [], "\n".join(found)


def _module_imports(path: Path) -> set[str]:
    """The raptor modules ``path`` imports (anywhere in the file, lazily or not), dotted."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("raptor.")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("raptor"):
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}  # `from raptor.cli import train`
    return out


def _module_graph() -> dict[str, set[str]]:
    modules = {}
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC.parent).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        modules[name] = path
    return {name: {m for m in _module_imports(path) if m in modules and m != name}
            for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), i.e. import cycles."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_between_modules():
    # a package __init__ importing its own submodules (lazy exports) is not a cycle: drop parent -> child
    graph = {m: {t for t in deps if not t.startswith(m + ".")} for m, deps in _module_graph().items()}
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]


def test_no_cli_module_assembles_a_run():
    # build_trainer / start_run / fingerprint belong to raptor.training.run.fine_tune.run_fine_tune, the
    # one library function both objectives of `raptor train` go through
    found = []
    for path in sorted((SRC / "cli").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("raptor"):
                found += [f"{path.name}: {a.name}" for a in node.names if a.name in ASSEMBLY]
    assert found == [], found


def _calls(path: Path, name: str) -> list[str]:
    """``file:function`` of every call of ``name`` in ``path`` (the enclosing top-level function)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for top in tree.body:
        for node in ast.walk(top):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == name:
                out.append(f"{path.relative_to(SRC.parents[1])}:{getattr(top, 'name', '<module>')}")
    return out


def test_one_assembly_build_trainer_is_called_from_assemble_run_only():
    """Issue 34: a run is assembled in one library function; everything else (the CLI, fine_tune,
    the demo, the audits, the experiments) goes through it. Tests and benchmarks may call build_trainer."""
    roots = [SRC, SRC.parents[1] / "experiments"]
    callers = sorted(c for root in roots for path in root.rglob("*.py") for c in _calls(path, "build_trainer"))
    assert callers == ["src/raptor/training/run/assemble.py:assemble_run"], callers
    resolvers = sorted(c for root in roots for path in root.rglob("*.py") for c in _calls(path, "resolve_batch_size"))
    assert resolvers == ["src/raptor/training/run/assemble.py:assemble_run"], resolvers


def test_every_subpackage_is_covered_by_the_layering_rule():
    packages = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages <= set(ALLOWED), f"add {sorted(packages - set(ALLOWED))} to ALLOWED"


@pytest.mark.parametrize("leaf", sorted(LEAVES))
def test_leaf_modules_import_only_the_standard_library(leaf):
    path = SRC / f"{leaf}.py"
    tree = ast.parse(path.read_text(), filename=str(path))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{leaf}.py has a relative import"
            imported.add(node.module.split(".")[0])
    outside = sorted(imported - set(sys.stdlib_module_names) - {"__future__"})
    assert outside == [], f"raptor.{leaf} is exempt from the layering rule only as a stdlib-only leaf: {outside}"


def _packages() -> list[str]:
    """raptor and every (nested) sub-package, by dotted name."""
    names = ["raptor"]
    for init in sorted(SRC.rglob("__init__.py")):
        rel = init.parent.relative_to(SRC)
        if rel.parts:
            names.append(".".join(("raptor", *rel.parts)))
    return names


def _defines_module_getattr(init: Path) -> bool:
    tree = ast.parse(init.read_text(), filename=str(init))
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
            return True
        if isinstance(node, ast.Assign):
            targets = [t for tgt in node.targets for t in (tgt.elts if isinstance(tgt, ast.Tuple) else [tgt])]
            if any(isinstance(t, ast.Name) and t.id == "__getattr__" for t in targets):
                return True
    return False


def _lazy_packages() -> list[str]:
    found = []
    for package in _packages():
        init = SRC.joinpath(*package.split(".")[1:], "__init__.py")
        if _defines_module_getattr(init):
            found.append(package)
    return found


def test_lazy_packages_are_found():
    # guards the scans below against finding nothing
    assert {"raptor", "raptor.accounting", "raptor.data"} <= set(_lazy_packages())


@pytest.mark.parametrize("package", _lazy_packages())
def test_lazy_package_uses_the_shared_helper(package):
    module = importlib.import_module(package)
    assert isinstance(getattr(module, "_EXPORTS", None), dict), f"{package}: lazy exports need an _EXPORTS table"
    assert module.__getattr__.__module__ == "raptor._lazy", f"{package}: use raptor._lazy.lazy_exports"
    assert set(module.__all__) - {"__version__"} == set(module._EXPORTS)


@pytest.mark.parametrize("package", _packages())
def test_no_exported_name_equals_a_submodule_name(package):
    # Importing a submodule binds its name on the package, shadowing a lazily exported object.
    module = importlib.import_module(package)
    submodules = {m.name for m in pkgutil.iter_modules(module.__path__)}
    exported = set(getattr(module, "_EXPORTS", {})) | set(getattr(module, "__all__", ()))
    assert sorted(exported & submodules) == [], f"{package}: rename the submodule or the export"


@pytest.mark.parametrize("package", ["raptor.accounting", "raptor.data"])
def test_lazy_exports_resolve_to_their_objects_after_every_submodule_is_imported(package):
    module = importlib.import_module(package)
    for sub in pkgutil.iter_modules(module.__path__):
        importlib.import_module(f"{package}.{sub.name}")
    for name, defining in module._EXPORTS.items():
        expected = getattr(importlib.import_module(defining), name)
        got = getattr(module, name)
        assert got is expected, f"{package}.{name} is {got!r}, not the export of {defining}"
    assert set(dir(module)) >= set(module._EXPORTS)
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        module.no_such_name  # noqa: B018


#: the longest a function may be without saying why in its docstring (issue 34)
MAX_FUNCTION_LINES = 80


def test_no_function_is_longer_than_80_lines_without_a_reason():
    long = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES and "80-line rule" not in (ast.get_docstring(node) or ""):
                    long.append(f"{path.relative_to(SRC)}:{node.name} ({lines} lines)")
    assert long == [], "split these, or say in the docstring why they break the 80-line rule: " + ", ".join(long)
