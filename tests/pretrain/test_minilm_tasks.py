"""Any task on the real model: ``minilm-moe``'s built head has 2 outputs; a 3-class or a regression task
gets a head of its own size at load, drawn from the run's explicit generator (never the global RNG),
through ``raptor train`` and through ``raptor.load_model`` + ``raptor.fine_tune``."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open

import raptor
from raptor.cli.main import main

WORDS = ("good", "bad", "plain")


def _rows(label) -> list[dict]:
    return [{"sentence": f"a {WORDS[i % 3]} film number {i}", "label": label(i)} for i in range(24)]


def _tsv(path, rows) -> str:
    path.write_text("sentence\tlabel\n" + "".join(f"{r['sentence']}\t{r['label']}\n" for r in rows))
    return str(path)


CASES = {"three-class": (lambda i: i % 3, 3), "regression": (lambda i: round(0.7 * (i % 5), 1) + 0.1, 1)}


@pytest.mark.parametrize("case", CASES)
def test_raptor_train_sizes_the_head_to_the_file(case, minilm_cache, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RAPTOR_CACHE", str(minilm_cache))
    label, outputs = CASES[case]
    train = _tsv(tmp_path / "train.tsv", _rows(label))
    out = tmp_path / "out"
    assert main(["train", "--model", "minilm-moe", "--train-file", train, "--public-size", "8", "--steps", "1",
                 "--batch-size", "4", "--max-length", "12", "--seed", "0", "--no-progress",
                 "--output-dir", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"head has 2 output(s) and the task needs {outputs}: it is drawn anew" in err
    config = json.loads((out / "model" / "config.json").read_text())
    assert config.get("problem_type") == ("regression" if outputs == 1 else None)
    with safe_open(str(out / "model" / "model.safetensors"), framework="pt") as f:
        assert f.get_slice("classifier.weight").get_shape() == [outputs, 384]


@pytest.mark.parametrize("case", CASES)
def test_load_model_and_fine_tune_size_the_head(case, minilm_cache, tmp_path, monkeypatch):
    monkeypatch.setenv("RAPTOR_CACHE", str(minilm_cache))
    label, outputs = CASES[case]
    torch.manual_seed(1)
    before = torch.get_rng_state()
    model = raptor.load_model("minilm-moe", num_labels=outputs, generator=torch.Generator().manual_seed(7))
    assert torch.equal(torch.get_rng_state(), before), "loading must not read or advance the global RNG"
    assert model.classifier.weight.shape == (outputs, 384) and model.config.num_labels == outputs
    expected = torch.randn((outputs, 384), generator=torch.Generator().manual_seed(7)) * 0.02
    torch.testing.assert_close(model.classifier.weight, expected, rtol=0, atol=0)  # the generator's draw
    assert torch.count_nonzero(model.classifier.bias) == 0
    again = raptor.load_model("minilm-moe", num_labels=outputs, generator=torch.Generator().manual_seed(8))
    assert not torch.equal(again.classifier.weight, model.classifier.weight)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(minilm_cache / "minilm-moe-v2"))
    rows = _rows(label)
    config = raptor.tiny_recipe("dpsgd", steps=1, batch_size=4, max_length=12, output_dir=str(tmp_path / "run"))
    result = raptor.fine_tune(model, tokenizer, rows[:16], rows[16:], config, public=rows[16:], progress=False)
    assert result.results["steps"] == 1


def test_a_head_of_the_task_size_is_kept(minilm_cache, monkeypatch):
    monkeypatch.setenv("RAPTOR_CACHE", str(minilm_cache))
    built = raptor.load_model("minilm-moe")
    two = raptor.load_model("minilm-moe", num_labels=2, generator=torch.Generator().manual_seed(7))
    assert torch.equal(built.classifier.weight, two.classifier.weight)  # the build's public head, not redrawn


def test_fine_tune_without_a_model_trains_the_default_model_under_lora(minilm_cache, tmp_path, monkeypatch):
    """``raptor.fine_tune(None, None, rows)``: minilm-moe, its head sized to the labels, LoRA r 8 at
    lr 5e-3 (``raptor.default_recipe``); the same with a config given keeps the config."""
    monkeypatch.setenv("RAPTOR_CACHE", str(minilm_cache))
    rows = _rows(lambda i: i % 3)
    config = raptor.default_recipe(steps=1, batch_size=4, max_length=12, seed=0, output_dir=str(tmp_path / "run"),
                                   privacy=raptor.PrivacyConfig(epsilon=8.0, secure_rng=False))
    assert config.lora and config.optim.lr == 5e-3 and config.layers == "auto"
    result = raptor.fine_tune(None, None, rows[:16], rows[16:], config, public=rows[16:], progress=False)
    assert result.results["steps"] == 1 and result.results["config"]["lora"]
    assert type(result.model).__name__ == "PeftModel"
    assert result.model.base_model.model.config.num_labels == 3
    from raptor.errors import ConfigError

    with pytest.raises(ConfigError, match="tiny family"):
        raptor.fine_tune("switch_transformers", None, rows[:16], rows[16:], config, public=rows[16:], progress=False)
