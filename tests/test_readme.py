"""The README's Python example runs as printed, and its two set-up commands are what CI runs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def _run_in_empty_dir(code: str, cwd: Path) -> subprocess.CompletedProcess:
    """``code`` run by a fresh interpreter in ``cwd`` (an empty directory, as after a fresh clone and
    install: nothing the tests create is there)."""
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)})


def test_readme_has_a_python_example_and_it_runs_as_written_in_an_empty_directory(tmp_path):
    blocks = python_blocks(README)
    assert len(blocks) >= 2, "README.md should show raptor.fine_tune and the per-record engine in ```python blocks"
    api = [code for code in blocks if "raptor.fine_tune(" in code]
    assert len(api) == 1, "one ```python block shows raptor.fine_tune"
    for i, code in enumerate(blocks):
        assert len(code.strip().splitlines()) <= 15 or code not in api, "the fine_tune snippet is <= 15 lines"
        cwd = tmp_path / f"block{i}"
        cwd.mkdir()
        out = _run_in_empty_dir(code, cwd)
        assert out.returncode == 0, f"README python block {i} failed:\n{out.stderr[-3000:]}"
        assert out.stdout.strip(), f"README python block {i} prints"
        if code in api:
            assert (cwd / "switch-dp" / "config.json").is_file(), "the API example saves its fine-tuned model"


def test_quickstart_gives_exactly_two_commands_and_ci_runs_the_test_one():
    quick = README[README.index("## Quickstart"):]
    first_block = re.search(r"```bash\n(.*?)```", quick, flags=re.S).group(1)
    commands = [line.split("#")[0].strip() for line in first_block.splitlines() if line.split("#")[0].strip()]
    assert commands == ["make demo", "make test"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^make test$", ci, flags=re.M)


def test_the_fine_tune_docstring_example_runs(tmp_path, monkeypatch):
    import doctest

    import raptor.training.run.fine_tune as module

    monkeypatch.chdir(tmp_path)
    finder = doctest.DocTestFinder()
    tests = [t for t in finder.find(module) if t.name.endswith(".fine_tune") and t.examples]
    assert tests, "raptor.fine_tune's docstring should carry a runnable example"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in tests:
        runner.run(test)
    assert runner.failures == 0 and runner.tries >= 5


def _layout_tree() -> str:
    section = README[README.index("## Layout"):]
    return re.search(r"```\n(.*?)```", section, flags=re.S).group(1)


def test_every_package_under_src_raptor_appears_in_the_layout_tree():
    tree = _layout_tree()
    src = ROOT / "src" / "raptor"
    packages = sorted(p.parent.relative_to(src) for p in src.rglob("__init__.py") if p.parent != src)
    missing = [str(p) for p in packages if f"{p.name}/" not in tree]
    assert packages and missing == [], f"add {missing} to the README's layout tree"
    assert "evaluator.py" in tree and "evaluation/      GLUE metrics" in tree  # the Evaluator lives in training/


def test_the_readme_stays_short_and_points_to_the_moved_results():
    assert len(README.splitlines()) <= 400
    assert "docs/RESULTS.md" in README and "benchmarks/README.md" in README
    assert (ROOT / "docs" / "RESULTS.md").is_file()


def test_the_cli_table_names_every_method_and_the_paper_recipe():
    from raptor.recipes import RECIPES
    from raptor.training.methods import METHOD_SPECS

    row = next(line for line in README.splitlines() if line.startswith("| `raptor train` |"))
    named = set(re.findall(r"`(?:--method )?([a-z-]+)`", row))
    missing = [m for m in METHOD_SPECS if m not in named]
    assert missing == [], f"add {missing} to the README's `raptor train` row"
    assert all(f"`--recipe {name}`" in row for name in RECIPES)


def test_the_command_table_has_a_row_for_every_command():
    from raptor.cli.main import COMMANDS

    rows = {m.group(1) for m in re.finditer(r"^\| `raptor ([a-z-]+)", README, flags=re.M)}
    missing = [name for name in COMMANDS if name not in rows]
    assert missing == [], f"add a row for raptor {missing} to the README's command table"


def test_the_layout_tree_names_every_top_level_module_and_every_training_module():
    tree = _layout_tree()
    src = ROOT / "src" / "raptor"
    modules = [p for p in (*src.glob("*.py"), *(src / "training").glob("*.py")) if p.name != "__init__.py"]
    missing = [str(p.relative_to(src)) for p in modules if p.name not in tree]
    assert modules and missing == [], f"add {missing} to the README's layout tree"


def test_the_install_note_says_how_to_get_the_cpu_build_of_the_pinned_torch():
    pins = re.findall(r'"(torch==[^"]+)"', (ROOT / "pyproject.toml").read_text())  # no tomllib on Python 3.10
    assert len(pins) == 1
    assert f"pip install {pins[0]} --index-url https://download.pytorch.org/whl/cpu" in README
