"""Privacy rule 2 end to end: ``raptor train`` and ``raptor.fine_tune`` follow the same rule (public
data only when declared; a user file is never sliced by default) and record the source."""

from __future__ import annotations

import json

import pytest
import torch

from raptor.cli.main import main
from raptor.errors import ConfigError

WORDS = ["good", "bad", "great", "awful", "fine", "poor", "nice", "dull"]


def _rows(n):
    return [(f"{WORDS[i % 8]} movie {WORDS[(3 * i) % 8]} plot", i % 2) for i in range(n)]


def _write_tsv(path, rows):
    path.write_text("sentence\tlabel\n" + "".join(f"{s}\t{y}\n" for s, y in rows))
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("data")
    rows = _rows(130)
    _write_tsv(d / "train.tsv", rows[:100])
    _write_tsv(d / "dev.tsv", rows[100:120])
    _write_tsv(d / "public.tsv", rows[120:])
    return d


def _train(files, out, *extra):
    return main(["train", "--model", "switch_transformers", "--train-file", str(files / "train.tsv"), "--validation-file", str(files / "dev.tsv"),
                 "--set", "model.vocab_size=60", "--max-length", "12", "--set", "model.hidden_size=16", "--batch-size", "16",
                 "--set", "performance.micro_batch_size=16", "--steps", "1", "--seed", "0", "--output-dir", str(out),
                 "--no-progress", "--epsilon", "4", *extra])


def test_cli_refuses_an_undeclared_public_source_before_anything_runs(files, tmp_path, capsys):
    assert _train(files, tmp_path / "run") == 2
    err = capsys.readouterr().err
    assert "--public-file" in err and "--public-size" in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_cli_nonprivate_uses_its_training_data_and_says_so(files, tmp_path):
    assert _train(files, tmp_path / "run", "--method", "nonprivate") == 0
    res = json.loads((tmp_path / "run" / "results.json").read_text())
    assert res["data"]["public_source"]["kind"] == "training-data" and res["data"]["private_records"] == 100


def test_cli_public_file_keeps_every_training_record_private(files, tmp_path, capsys):
    assert _train(files, tmp_path / "run", "--public-file", str(files / "public.tsv")) == 0
    res = json.loads((tmp_path / "run" / "results.json").read_text())
    assert res["data"]["public_source"] == {"kind": "file", "path": str(files / "public.tsv"), "size": None,
                                            "description": f"public file {files / 'public.tsv'}"}
    assert res["data"]["private_records"] == 100 and res["data"]["public_records"] == 10
    assert "public (public file" in capsys.readouterr().out


def test_cli_slice_only_when_asked(files, tmp_path):
    assert _train(files, tmp_path / "run", "--public-size", "20") == 0
    res = json.loads((tmp_path / "run" / "results.json").read_text())
    assert res["data"]["public_source"]["kind"] == "slice" and res["data"]["private_records"] == 80


def _saved_model(files, path, public_txt: str | None):
    from raptor.data import load_user_files, save_tokenizer, train_wordpiece
    from raptor.moe.models import TinySize, build_model

    tok = train_wordpiece(load_user_files(files / "public.tsv").train.corpus(), vocab_size=60)
    save_tokenizer(tok, path)
    build_model("olmoe", generator=torch.Generator().manual_seed(0),
                size=TinySize(vocab_size=len(tok), hidden_size=16)).save_pretrained(str(path))
    if public_txt is not None:
        (path / "public.txt").write_text(public_txt)


def test_cli_model_public_corpus_hook(files, tmp_path):
    _saved_model(files, tmp_path / "model", "good movie nice plot\nawful movie dull plot\n")
    out = tmp_path / "run"
    assert main(["train", "--model", str(tmp_path / "model"), "--train-file", str(files / "train.tsv"),
                 "--max-length", "12", "--batch-size", "16", "--steps", "1", "--seed", "0", "--output-dir", str(out),
                 "--no-progress"]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["data"]["public_source"]["kind"] == "model-corpus"
    assert res["data"]["public_source"]["path"] == str(tmp_path / "model" / "public.txt")
    assert res["data"]["private_records"] == 100 and res["data"]["public_records"] == 2


def test_cli_method_without_public_statistics_runs_without_public_data(files, tmp_path):
    _saved_model(files, tmp_path / "model", None)
    out = tmp_path / "run"
    assert main(["train", "--model", str(tmp_path / "model"), "--train-file", str(files / "train.tsv"),
                 "--method", "dpsgd", "--layers", "1", "--max-length", "12", "--batch-size", "16", "--steps", "1",
                 "--seed", "0", "--output-dir", str(out), "--no-progress"]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["data"]["public_source"]["kind"] == "none" and res["data"]["public_records"] == 0
    assert res["data"]["private_records"] == 100


def _library_run(method, **kw):
    import raptor
    from raptor.data import train_wordpiece
    from raptor.moe.models import TinySize, build_model

    train = [{"sentence": s, "label": y} for s, y in _rows(64)]
    tok = train_wordpiece([f"the {w} plot movie" for w in WORDS], vocab_size=60)
    model = build_model("switch_transformers", generator=torch.Generator().manual_seed(0),
                        size=TinySize(vocab_size=len(tok), hidden_size=16))
    config = raptor.TrainConfig(method=method, batch_size=8, steps=1, max_length=12, seed=0,
                                privacy=raptor.PrivacyConfig(epsilon=None if method == "nonprivate" else 8.0,
                                                             secure_rng=False))
    return raptor.fine_tune(model, tok, train, None, config, progress=False, **kw)


def test_library_follows_the_same_rule():
    with pytest.raises(ConfigError, match="--public-file"):
        _library_run("raptor")
    assert _library_run("raptor", public_size=16).results["data"]["public_source"]["kind"] == "slice"
    res = _library_run("shared-only").results  # trains no expert: nothing is computed from public data
    assert res["data"]["public_source"]["kind"] == "none" and res["data"]["private_records"] == 64
    assert res["data"]["public_records"] == 0
    assert _library_run("nonprivate").results["data"]["public_source"]["kind"] == "training-data"
