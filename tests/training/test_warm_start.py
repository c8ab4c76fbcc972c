"""Private fine-tuning from the shipped warm start, end to end: every method, public stats, inspect."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from raptor.cli.main import main
from raptor.moe.models import build_model, load_model
from raptor.shipped import SHIPPED, shipped_dir
from raptor.training.config import METHODS

WARM = next(iter(SHIPPED))
TINY = ["--set", "data.max_train_samples=48", "--set", "data.max_eval_samples=16", "--public-size", "32", "--batch-size", "16",
        "--set", "performance.micro_batch_size=16", "--steps", "1", "--max-length", "16", "--seed", "0", "--no-progress"]


@pytest.mark.slow
@pytest.mark.parametrize("method", METHODS)
def test_train_from_the_shipped_model_with_label_word_head_runs_for_every_method(method, tmp_path, capsys):
    out = tmp_path / method
    rc = main(["train", "--model", WARM, "--set", "model.head_init=label-words", "--method", method, "--epsilon", "8",
               "--output-dir", str(out), *TINY])
    assert rc == 0, capsys.readouterr().err
    res = json.loads((out / "results.json").read_text())
    assert res["model"] == WARM and res["steps"] == 1
    assert res["head_init"] == {"rule": "label-words", "label_words": ["negative", "positive"]}
    assert 0.0 <= res["final_accuracy"] <= 1.0
    eps = float(res["epsilon"])  # strict JSON writes inf as a string
    assert (eps == float("inf")) if method == "nonprivate" else (0 < eps <= 8.0)
    table = res["streams"]["public"]["layer_choice"]["layers"]
    assert [row["layer"] for row in table] == [0, 1, 2, 3]  # the warm model's 4 MoE layers, 8 experts each
    assert all(row["num_experts"] == 8 for row in table)


def _layer_entropies(capsys, model: str) -> list[float]:
    assert main(["inspect", "--model", model, "--public-size", "64", "--max-length", "24", "--json"]) == 0
    return [row["entropy"] for row in json.loads(capsys.readouterr().out)["layers"]]


def test_inspect_shows_the_warm_models_routing_entropies(capsys, tmp_path):
    assert main(["inspect", "--model", WARM, "--public-size", "64", "--max-length", "24"]) == 0
    printed = capsys.readouterr().out
    assert "entropy" in printed.lower()
    warm = _layer_entropies(capsys, WARM)
    assert len(warm) == 4 and all(0.0 < h <= torch.log(torch.tensor(8.0)).item() + 1e-9 for h in warm)
    # Computed on the warm weights: the same architecture with random weights routes differently.
    config = load_model(WARM, num_labels=2).config
    build_model(config, generator=torch.Generator().manual_seed(5)).save_pretrained(str(tmp_path / "random"))
    for fname in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(shipped_dir() / WARM / fname, tmp_path / "random" / fname)
    random = _layer_entropies(capsys, str(tmp_path / "random"))
    assert warm != random
