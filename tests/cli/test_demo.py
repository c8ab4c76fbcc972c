"""`raptor demo`: a short run end to end, reproducibility, no global RNG, argument errors."""

from __future__ import annotations

import argparse
import json

import pytest
import torch

from raptor.cli import demo
from raptor.cli.main import main
from raptor.data import ClassificationData, encode, train_wordpiece
from raptor.moe.models import build_model, load_model


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    demo.add_arguments(parser)
    return parser.parse_args(list(argv))


def short_args(out, *extra: str) -> argparse.Namespace:
    return parse("--epochs", "1", "--max-train-samples", "200", "--max-eval-samples", "100",
                 "--vocab-size", "800", "--output-dir", str(out), "--no-progress", *extra)


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    rng_before = torch.random.get_rng_state()
    assert demo.run(short_args(out)) == 0
    rng_after = torch.random.get_rng_state()
    return out, json.loads((out / "results.json").read_text()), torch.equal(rng_before, rng_after)


def test_writes_results(short_run):
    out, results, _ = short_run
    assert results["private"] is False
    assert results["train_records"] == 200 and results["dev_records"] == 100
    assert results["public_records"] == 1600  # 20% of the 8,000 bundled train records
    assert results["steps"] == 7  # ceil(200 / 32)
    assert 0.0 <= results["dev_accuracy"] <= 1.0
    assert results["model_family"] == "switch_transformers"
    assert (out / "tokenizer" / "tokenizer.json").is_file()


def test_saved_model_reloads_and_predicts_the_same(short_run):
    out, _, _ = short_run
    model = load_model(out / "model")
    assert model.config.model_type == "switch_transformers"
    ids = torch.tensor([[2, 10, 11, 3]])
    with torch.no_grad():
        assert model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits.shape == (1, 2)


def test_global_rng_untouched(short_run):
    assert short_run[2], "the demo drew from or reseeded the global torch RNG"


def test_same_seed_same_result(short_run, tmp_path):
    _, first, _ = short_run
    demo.run(short_args(tmp_path))
    again = json.loads((tmp_path / "results.json").read_text())
    assert again["dev_accuracy"] == first["dev_accuracy"]
    assert again["final_epoch_mean_train_loss"] == first["final_epoch_mean_train_loss"]


def test_training_loop_learns_a_separable_toy_task():
    texts = tuple(["good great fine"] * 16 + ["bad awful poor"] * 16)
    data = ClassificationData(texts, (1,) * 16 + (0,) * 16, ("neg", "pos"))
    tok = train_wordpiece(texts, vocab_size=40, min_frequency=1)
    enc = encode(tok, data, max_length=8)
    model = build_model("switch_transformers", generator=torch.Generator().manual_seed(0),
                        size=demo.model_size(len(tok), 8))
    losses = demo.train_non_private(model, enc, epochs=6, batch_size=8, lr=3e-3,
                                    generator=torch.Generator().manual_seed(1), progress=False)
    assert len(losses) == 24
    assert sum(losses[-4:]) / 4 < 0.5 * sum(losses[:4]) / 4
    assert demo.accuracy(model, enc) == 1.0


def test_help_lists_demo(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--epochs", "--batch-size", "--lr", "--seed", "--output-dir", "--max-length"):
        assert flag in out


@pytest.mark.parametrize("argv, message", [
    (["--epochs", "0"], "--epochs must be a positive integer"),
    (["--lr", "-1"], "--lr must be a positive finite number"),
    (["--max-train-samples", "0"], "--max-train-samples must be a positive integer"),
])
def test_bad_arguments_exit_2(tmp_path, capsys, argv, message):
    assert main(["demo", "--output-dir", str(tmp_path), *argv]) == 2
    assert message in capsys.readouterr().err
