"""`raptor train --recipe paper` and the issue-22 flags: recipe defaults, explicit flags win, and a
run under the protocol trains with a frozen label-word head, LoRA and the last MoE layer; the
small things: --metric on a --train-file run, the collapsed-classifier warning, --no-progress."""

from __future__ import annotations

import json

from raptor.cli.main import main
from raptor.recipes import RECIPES
from raptor.training.config import TrainConfig


def _config(*flags):
    from raptor.cli.main import build_parser
    from raptor.cli.train import config_from_args

    args = build_parser(["train"]).parse_args(["train", *flags])
    return config_from_args(args), args


def test_recipe_fills_only_what_was_not_given():
    cfg, args = _config("--recipe", "paper", "--set", "privacy.shared_ratio=0.9")
    assert (cfg.lora, cfg.freeze_head, cfg.layers, cfg.batch_size, cfg.optim.lr) == (True, True, "last", 1024, 2e-4)
    assert cfg.privacy.shared_ratio == 0.9 and args.head_init == "label-words"
    plain, args = _config()
    default = TrainConfig()
    assert (plain.lora, plain.freeze_head, plain.layers, plain.privacy.shared_ratio, args.head_init) == \
        (True, default.freeze_head, "auto", default.privacy.shared_ratio, "random")  # LoRA: the default model's
    tiny, _ = _config("--model", "switch_transformers")
    assert tiny.lora is default.lora is False
    assert plain.batch_size is None and plain.optim.lr == 5e-3  # N/10 later; the pre-trained LoRA rate


def test_recipe_config_is_the_recipe_with_the_flags_given():
    """Under --recipe, every field not given is the recipe's own (the base of the run's config)."""
    for name, recipe in RECIPES.items():
        cfg, _ = _config("--recipe", name, "--model", "switch_transformers")
        assert cfg == recipe("raptor"), name
        given, _ = _config("--recipe", name, "--model", "switch_transformers", "--epochs", "1", "--lr", "0.1")
        assert given == __import__("dataclasses").replace(recipe("raptor"), epochs=1.0, optim=__import__(
            "dataclasses").replace(recipe("raptor").optim, lr=0.1)), name


def test_paper_recipe_run_end_to_end(sentiment_files, tmp_path):
    out = tmp_path / "run"
    assert main(["train", "--model", "switch_transformers", "--recipe", "paper", "--train-file", str(sentiment_files / "train.tsv"), "--validation-file",
                 str(sentiment_files / "dev.tsv"), "--public-size", "20", "--set", "model.vocab_size=60", "--max-length", "12",
                 "--set", "model.hidden_size=16", "--batch-size", "16", "--set", "performance.micro_batch_size=8", "--seed", "3",
                 "--steps", "2", "--set", "model.label_words=bad,good", "--output-dir", str(out), "--no-progress",
                 "--set", "run.metric=matthews_correlation,f1"]) == 0
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
    assert main(["train", "--model", "switch_transformers", "--train-file", str(sentiment_files / "train.tsv"), "--public-size", "20", "--set", "model.vocab_size=60",
                 "--max-length", "12", "--set", "model.hidden_size=16", "--batch-size", "16", "--seed", "3", "--steps", "1",
                 "--output-dir", str(tmp_path / "r"), "--no-progress", "--set", "run.metric=pearson"]) == 2
    assert "--set run.metric" in capsys.readouterr().err


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
