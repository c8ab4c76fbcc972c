"""Every process a test starts is bounded in time: a hang fails the test with a message instead of
holding the suite (tests/training/test_kill_resume.py once waited 30 min on a loaded machine).

A static scan of tests/: each ``subprocess.run/call/check_call/check_output`` passes ``timeout=``,
and each ``.wait()`` / ``.communicate()`` call passes a timeout (an argument or ``timeout=``).
A ``Popen`` itself takes none; what waits on it must.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
RUNNERS = {"run", "call", "check_call", "check_output"}
WAITS = {"wait", "communicate"}


def _unbounded_calls(path: Path, root: Path = TESTS) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        func, kw = node.func, {k.arg for k in node.keywords}
        runner = func.attr in RUNNERS and isinstance(func.value, ast.Name) and func.value.id == "subprocess"
        if runner and "timeout" not in kw:
            found.append(f"{path.relative_to(root)}:{node.lineno}: subprocess.{func.attr} without timeout=")
        if func.attr in WAITS and not node.args and "timeout" not in kw:
            found.append(f"{path.relative_to(root)}:{node.lineno}: .{func.attr}() without a timeout")
    return found


def test_every_subprocess_call_in_the_tests_has_a_timeout():
    files = sorted(TESTS.rglob("*.py"))
    assert any("Popen" in p.read_text() for p in files)  # the scan sees the tests that start processes
    found = [line for p in files for line in _unbounded_calls(p)]
    assert found == [], "\n".join(found)


def test_the_scan_finds_an_unbounded_call(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import subprocess\nsubprocess.run(['true'])\np = subprocess.Popen(['true'])\np.wait()\n"
                     "p.wait(timeout=5)\np.communicate(None, 5)\nsubprocess.run(['true'], timeout=5)\n")
    found = _unbounded_calls(probe, tmp_path)
    assert found == ["probe.py:2: subprocess.run without timeout=", "probe.py:4: .wait() without a timeout"]
