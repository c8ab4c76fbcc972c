"""Names resolve one way, and say so: a local directory ``./minilm-moe`` in the working directory wins
over the built model ``minilm-moe`` (docs/USAGE.md), with one warning line; a refusal that follows
names the local directory instead of telling the user to pass the ``--model minilm-moe`` they gave.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pytest
from bad_input_files import one_error_line, run_cli

from raptor import shipped
from raptor.errors import RaptorWarning
from raptor.pretrain import minilm


@pytest.fixture
def cwd(tmp_path, monkeypatch):
    """A working directory; the built model is never built here (a build would fail the test)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RAPTOR_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(shipped, "_SHADOW_REPORTED", set(), raising=False)

    def no_build(name, target):
        raise AssertionError("the built model must not be built: the local directory wins")

    monkeypatch.setattr(minilm, "build", no_build)
    (tmp_path / "train.tsv").write_text("sentence\tlabel\n" + "".join(f"a film {i}\t{i % 2}\n" for i in range(16)))
    return tmp_path


def _local_model(d):
    """``./minilm-moe``: a model directory (the shipped Switch's files) that ships no public corpus."""
    shutil.copytree(shipped.shipped_dir() / "switch-public-tiny", d / "minilm-moe",
                    ignore=shutil.ignore_patterns("public_corpus.txt", "SHA256SUMS", "*.png", "pretrain.json"))


def _warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if "warning:" in line and "local directory ./minilm-moe" in line]


def test_a_local_directory_wins_with_one_warning_and_the_refusal_names_it(cwd, capsys):
    _local_model(cwd)
    rc, _, err = run_cli(["train", "--model", "minilm-moe", "--train-file", "train.tsv", "--steps", "1",
                          "--no-progress", "--output-dir", "out"], capsys)
    shadow = _warnings(err)
    assert len(shadow) == 1, err
    assert "--model minilm-moe: the local directory ./minilm-moe" in shadow[0]
    assert "is used, not the built model minilm-moe" in shadow[0] and "rename ./minilm-moe" in shadow[0]
    one_error_line(rc, err, r"--model minilm-moe is the local directory \./minilm-moe here, which ships none and "
                            r"shadows the built model minilm-moe")
    assert "--model minilm-moe, the real pretrained model, ships one" not in err


def test_an_empty_local_directory_of_the_name_is_refused_naming_it(cwd, capsys):
    (cwd / "minilm-moe").mkdir()
    rc, _, err = run_cli(["train", "--model", "minilm-moe", "--train-file", "train.tsv", "--steps", "1",
                          "--no-progress", "--output-dir", "out"], capsys)
    one_error_line(rc, err, r"--model minilm-moe: the local directory \./minilm-moe .* is used, not the built model "
                            r"minilm-moe.*not a model directory \(no config.json\)")


def test_a_path_to_the_directory_gives_no_warning(cwd):
    _local_model(cwd)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert shipped.resolve("./minilm-moe") == "./minilm-moe"


def test_the_library_resolves_the_same_way_and_warns_once(cwd):
    _local_model(cwd)
    with pytest.warns(RaptorWarning, match=r"'minilm-moe': the local directory \./minilm-moe .* is used") as caught:
        assert shipped.resolve("minilm-moe") == "minilm-moe"
        assert shipped.resolve("minilm-moe") == "minilm-moe"
    assert len([w for w in caught if issubclass(w.category, RaptorWarning)]) == 1


def test_usage_documents_which_wins():
    text = (Path(__file__).resolve().parents[2] / "docs" / "USAGE.md").read_text()
    assert "a local path wins over a shipped or built model's short name" in text


def test_a_local_file_of_the_name_is_refused_naming_it(cwd, capsys):
    (cwd / "minilm-moe").write_text("not a model")
    rc, _, err = run_cli(["train", "--model", "minilm-moe", "--train-file", "train.tsv", "--steps", "1",
                          "--no-progress", "--output-dir", "out"], capsys)
    one_error_line(rc, err, r"--model minilm-moe: the local file \./minilm-moe .* is used, not the built model "
                            r"minilm-moe.*it is not a model directory \(no config.json\)")


@pytest.mark.parametrize("name, pattern", [
    ("switch_transformers", r"switch_transformers is a tiny family with no weights to load; build it with "
                            r"raptor\.moe\.models\.build_model"),
    ("nope-model", r"'nope-model'\): no such directory, shipped or built model; shipped and built models: "),
])
def test_load_model_of_a_name_that_is_no_model_is_one_line(name, pattern, cwd, monkeypatch):
    """Not the hub's OSError after its retries: a name without an owner/ is never a hub name here."""
    import raptor
    from raptor.errors import ConfigError

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError, match=pattern):
        raptor.load_model(name, num_labels=2)
