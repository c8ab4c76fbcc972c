"""The README's Python example runs as printed, and its two set-up commands are what CI runs."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_readme_has_a_python_example_and_it_runs(capsys):
    blocks = python_blocks(README)
    assert blocks, "README.md should show the per-record engine API in a ```python block"
    for code in blocks:
        exec(compile(code, "README.md", "exec"), {"__name__": "readme_example"})  # noqa: S102
    assert capsys.readouterr().out.strip(), "the example prints the expert norms"


def test_quickstart_gives_exactly_two_commands_and_ci_runs_the_test_one():
    quick = README[README.index("## Quickstart"):]
    first_block = re.search(r"```bash\n(.*?)```", quick, flags=re.S).group(1)
    commands = [line.split("#")[0].strip() for line in first_block.splitlines() if line.split("#")[0].strip()]
    assert commands == ["make demo", "make test"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^make test$", ci, flags=re.M)
