"""The README's Python example runs as printed, and its two set-up commands are what CI runs."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def _tiny_olmoe_dir(path: Path) -> None:
    """A real save_pretrained directory (model + tokenizer) like the one the README's snippet loads."""
    import torch

    from raptor.data import save_tokenizer, train_wordpiece
    from raptor.moe.models import TinySize, build_model

    tok = train_wordpiece(["a good film", "the bad plot", "great awful fine dull movie"], vocab_size=60)
    save_tokenizer(tok, path)
    build_model("olmoe", generator=torch.Generator().manual_seed(0),
                size=TinySize(vocab_size=len(tok), hidden_size=16)).save_pretrained(str(path))


def test_readme_has_a_python_example_and_it_runs(capsys, tmp_path, monkeypatch):
    blocks = python_blocks(README)
    assert len(blocks) >= 2, "README.md should show raptor.fine_tune and the per-record engine in ```python blocks"
    monkeypatch.chdir(tmp_path)
    _tiny_olmoe_dir(tmp_path / "tiny-olmoe")
    for code in blocks:
        assert len(code.strip().splitlines()) <= 15 or "fine_tune" not in code, "the fine_tune snippet is <= 15 lines"
        exec(compile(code, "README.md", "exec"), {"__name__": "readme_example"})  # noqa: S102
    out = capsys.readouterr().out
    assert out.strip(), "the examples print"
    assert (tmp_path / "tiny-olmoe-dp" / "config.json").is_file()


def test_quickstart_gives_exactly_two_commands_and_ci_runs_the_test_one():
    quick = README[README.index("## Quickstart"):]
    first_block = re.search(r"```bash\n(.*?)```", quick, flags=re.S).group(1)
    commands = [line.split("#")[0].strip() for line in first_block.splitlines() if line.split("#")[0].strip()]
    assert commands == ["make demo", "make test"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^make test$", ci, flags=re.M)
