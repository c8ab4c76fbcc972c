"""`raptor train --recipe paper` and the issue-22 flags: recipe defaults, explicit flags win, and a
run under the protocol trains with a frozen label-word head, LoRA and the last MoE layer; the
small things: --metric on a --train-file run, the collapsed-classifier warning, --no-progress."""

from __future__ import annotations

import argparse
import json

from raptor.cli.main import main
from raptor.cli.recipe import _FIELDS, apply_recipe
from raptor.recipes import RECIPES
from raptor.training.config import TrainConfig


def _parser():
    from raptor.cli.train import add_arguments

    p = argparse.ArgumentParser()
    add_arguments(p)
    return p


def test_recipe_fills_only_what_was_not_given():
    p = _parser()
    args = apply_recipe(p.parse_args(["--recipe", "paper", "--shared-ratio", "0.9"]))
    assert (args.lora, args.freeze_head, args.layers, args.batch_size, args.lr) == (True, True, "last", 1024, 2e-4)
    assert args.shared_ratio == 0.9 and args.head_init == "label-words"
    plain = apply_recipe(p.parse_args([]))
    default = TrainConfig()
    assert (plain.lora, plain.freeze_head, plain.layers, plain.shared_ratio, plain.head_init) == \
        (True, default.freeze_head, "auto", default.privacy.shared_ratio, "random")  # LoRA: the default model's
    tiny = apply_recipe(p.parse_args(["--model", "switch_transformers"]))
    assert tiny.lora is default.lora is False
    assert plain.lr is None and plain.batch_size is None  # their own default rules apply later


def test_recipe_fields_the_parser_does_not_govern_are_its_defaults():
    """Every recipe field either has a None parser default (filled by apply_recipe) or its parser
    default already equals the recipe's value (epochs, C, optimizer, max length)."""
    p = _parser()
    defaults = vars(p.parse_args([]))
    for name, recipe in RECIPES.items():
        cfg = recipe("raptor")
        for dest in _FIELDS:
            assert defaults[dest] is None, dest
        assert (defaults["epochs"], defaults["clip"], defaults["clip_expert"], defaults["optimizer"],
                defaults["max_length"]) == (cfg.epochs, cfg.privacy.clip_shared, cfg.privacy.clip_expert,
                                            cfg.optim.name, cfg.max_length), name


def test_paper_recipe_run_end_to_end(sentiment_files, tmp_path):
    out = tmp_path / "run"
    assert main(["train", "--model", "switch_transformers", "--recipe", "paper", "--train-file", str(sentiment_files / "train.tsv"), "--validation-file",
                 str(sentiment_files / "dev.tsv"), "--public-size", "20", "--vocab-size", "60", "--max-length", "12",
                 "--hidden-size", "16", "--batch-size", "16", "--micro-batch-size", "8", "--seed", "3",
                 "--steps", "2", "--label-words", "bad", "good", "--output-dir", str(out), "--no-progress",
                 "--metric", "matthews_correlation", "f1"]) == 0
    res = json.loads((out / "results.json").read_text())
    cfg = res["config"]
    assert (cfg["lora"], cfg["freeze_head"], cfg["layers"], cfg["privacy"]["shared_ratio"]) == \
        (True, True, "last", 0.3)
    assert res["head_init"]["rule"] == "label-words"
    assert list(res["final_metrics"]) == ["matthews_correlation", "f1"]
    assert res["main_metric"] == "matthews_correlation"
    assert "single_class_prediction" in res
    groups = res["streams"]["groups"]
    assert "shared" in groups and any(k.startswith("expert/") for k in groups)


def test_metric_of_the_wrong_task_type_is_refused(sentiment_files, tmp_path, capsys):
    assert main(["train", "--model", "switch_transformers", "--train-file", str(sentiment_files / "train.tsv"), "--public-size", "20", "--vocab-size", "60",
                 "--max-length", "12", "--hidden-size", "16", "--batch-size", "16", "--seed", "3", "--steps", "1",
                 "--output-dir", str(tmp_path / "r"), "--no-progress", "--metric", "pearson"]) == 2
    assert "--metric" in capsys.readouterr().err


def test_collapsed_classifier_is_reported():
    import torch

    from raptor.training.evaluator import Evaluator

    class Const(torch.nn.Module):
        def forward(self, input_ids, attention_mask=None, **_):
            out = torch.zeros(input_ids.shape[0], 2)
            out[:, 1] = 1.0
            return type("O", (), {"logits": out})()

    recs = {"input_ids": torch.ones(4, 3, dtype=torch.long), "attention_mask": torch.ones(4, 3, dtype=torch.long),
            "labels": torch.tensor([0, 1, 0, 1])}
    assert Evaluator({"dev": recs})(Const())["single_class"] == 1
