"""`raptor train` and `raptor inspect` end to end on tiny data (the CLI modules are owned by the trainer)."""

from __future__ import annotations

import json

import pytest

from raptor.cli.main import main


def test_train_writes_results_and_resumes(sentiment_files, tmp_path, capsys):
    out = tmp_path / "run"
    common = ["train", "--model", "switch_transformers", "--train-file", str(sentiment_files / "train.tsv"), "--validation-file", str(sentiment_files / "dev.tsv"),
              "--public-size", "20", "--set", "model.vocab_size=60", "--max-length", "12", "--set", "model.hidden_size=16",
              "--batch-size", "16", "--set", "performance.micro_batch_size=8", "--seed", "3", "--output-dir", str(out),
              "--no-progress", "--epsilon", "4"]
    assert main(common + ["--steps", "2"]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["steps"] == 2 and res["epsilon"] <= 4.0 and res["delta"] < 1 / 80
    assert res["data"]["private_records"] == 80 and res["data"]["public_records"] == 20
    assert set(res["sigma"]) == {"shared", "expert"} and res["seconds_per_step"] > 0 and res["peak_rss_mib"] > 0
    assert "loss" not in json.dumps(res).lower().replace("loss_fn", "").replace("dev_loss", "")  # no training loss
    assert (out / "checkpoint" / "state.json").is_file()
    printed = capsys.readouterr().out
    assert "NOT secure" in printed and "loss" not in printed

    # The checkpoint's ledger holds 2 steps; resuming it for a 2-step plan runs nothing more.
    state = json.loads((out / "checkpoint" / "state.json").read_text())
    assert sum(r["count"] for r in state["ledger"]["executed"]) == 2
    assert main(common + ["--steps", "2", "--resume", str(out / "checkpoint")]) == 0
    again = json.loads((out / "results.json").read_text())
    assert again["steps"] == 2 and again["epsilon"] == pytest.approx(res["epsilon"])


def test_train_head_from_label_words(sentiment_files, tmp_path, capsys):
    common = ["train", "--model", "switch_transformers", "--train-file", str(sentiment_files / "train.tsv"), "--validation-file", str(sentiment_files / "dev.tsv"),
              "--public-size", "20", "--set", "model.vocab_size=60", "--max-length", "12", "--set", "model.hidden_size=16",
              "--batch-size", "16", "--set", "performance.micro_batch_size=16", "--seed", "3", "--no-progress", "--epsilon", "4",
              "--steps", "1", "--set", "model.head_init=label-words"]
    # User files have no task: the words must be given.
    assert main(common + ["--output-dir", str(tmp_path / "a")]) == 2
    assert "--set model.label_words" in capsys.readouterr().err
    assert main(common + ["--set", "model.label_words=bad,good", "--output-dir", str(tmp_path / "b")]) == 0
    res = json.loads((tmp_path / "b" / "results.json").read_text())
    assert res["head_init"] == {"rule": "label-words", "label_words": ["bad", "good"]}


def test_train_bad_arguments_exit_2(sentiment_files, tmp_path, capsys):
    assert main(["train", "--model", "switch_transformers", "--task", "sst2", "--output-dir", str(tmp_path)]) == 2
    assert "--data-dir" in capsys.readouterr().err
    assert main(["train", "--model", "switch_transformers", "--layers", "x", "--output-dir", str(tmp_path)]) == 2


def test_inspect_prints_table_and_json(sentiment_files, capsys):
    args = ["inspect", "--model", "switch_transformers", "--train-file", str(sentiment_files / "train.tsv"), "--public-size", "40", "--vocab-size", "60",
            "--max-length", "12", "--hidden-size", "16", "--num-layers", "3"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "recommended layer(s):" in text and text.count("\n") >= 5
    assert main(args + ["--json", "--noise-multiplier", "1.0", "--batch-size", "32"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert len(d["layers"]) == 3 and len(d["chosen"]) == 1 and d["public_records"] == 40
    best = max(d["layers"], key=lambda s: (s["entropy"], s["layer"]))
    assert d["chosen"] == [best["layer"]]
    assert all(s["mean_noise_variance"] > 0 for s in d["layers"])


def test_nonprivate_results_are_strict_json(sentiment_files, tmp_path):
    out = tmp_path / "np"
    assert main(["train", "--model", "switch_transformers", "--method", "nonprivate", "--train-file", str(sentiment_files / "train.tsv"), "--public-size", "20",
                 "--set", "model.vocab_size=60", "--max-length", "12", "--set", "model.hidden_size=16", "--batch-size", "16",
                 "--steps", "1", "--seed", "0", "--output-dir", str(out), "--no-progress"]) == 0
    text = (out / "results.json").read_text()
    res = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    assert res["epsilon"] == "inf" and res["final_accuracy"] is None  # no validation file given


def test_train_from_a_saved_model_directory(sentiment_files, tmp_path):
    import torch

    from raptor.data import load_user_files, save_tokenizer, train_wordpiece
    from raptor.moe.models import TinySize, build_model

    texts = load_user_files(sentiment_files / "train.tsv").train
    tok = train_wordpiece(texts.corpus(), vocab_size=60)
    save_tokenizer(tok, tmp_path / "tok")
    model = build_model("olmoe", generator=torch.Generator().manual_seed(0),
                        size=TinySize(vocab_size=len(tok), hidden_size=16))
    model.save_pretrained(str(tmp_path / "model"))
    out = tmp_path / "run"
    assert main(["train", "--model", str(tmp_path / "model"), "--set", f"model.tokenizer={tmp_path / 'tok'}",
                 "--train-file", str(sentiment_files / "train.tsv"), "--validation-file", str(sentiment_files / "dev.tsv"),
                 "--public-size", "20", "--max-length", "12", "--batch-size", "16", "--steps", "1", "--seed", "0",
                 "--output-dir", str(out), "--no-progress", "--layers", "1"]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["trained_layers"] == [1] and res["model"] == str(tmp_path / "model")


def test_nonfinite_records_are_reported_with_their_caveat():
    from raptor.cli.train import nonfinite_warning

    assert nonfinite_warning(0) is None
    text = nonfinite_warning(3)
    assert "3 record-steps" in text and "zeroed" in text and "NOT protected by DP" in text
