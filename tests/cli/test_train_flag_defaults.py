"""--lora [RANK] reaches the config of every objective (a rank implies LoRA); LoRA and the learning
rate default by model kind: LoRA at lr 5e-3 on a pre-trained model (the default, minilm-moe), full
weights at 2e-4 with --no-lora, no LoRA at 3e-3 on a tiny one; the library's default_recipe agrees."""

from __future__ import annotations

from raptor.cli.main import build_parser
from raptor.cli.train import config_from_args


def test_lora_rank_flag_reaches_the_classification_config():
    parser = build_parser()

    def config(*flags):
        c = config_from_args(parser.parse_args(["train", "--model", "switch_transformers", *flags]))
        return c.lora, c.lora_rank

    assert config("--method", "dp-lora") == (False, 8)  # dp-lora is LoRA by its method
    assert config("--method", "dp-lora", "--lora", "4") == (False, 4)
    assert config("--method", "raptor") == (False, 8)
    assert config("--method", "raptor", "--lora") == (True, 8)
    assert config("--method", "raptor", "--lora", "16") == (True, 16)
    assert config("--method", "dpsgd", "--lora", "2", "--recipe", "paper") == (True, 2)


def test_a_lora_rank_that_is_not_an_integer_is_refused(capsys):
    import pytest

    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--model", "switch_transformers", "--lora", "big"])
    assert "the LoRA rank must be an integer, got 'big'" in capsys.readouterr().err


def test_default_lr_by_model_kind():
    from raptor.training.config import PRETRAINED_LORA_LR, PRETRAINED_LR, TINY_LR, default_lr

    assert default_lr("switch_transformers") == TINY_LR
    assert default_lr("switch-public-tiny") == TINY_LR  # the shipped warm start is tiny
    for name in ("minilm-moe", "/some/saved/model", "allenai/OLMoE-1B-7B-0924"):  # pre-trained: LoRA unless told
        assert default_lr(name) == PRETRAINED_LORA_LR and default_lr(name, lora=False) == PRETRAINED_LR
    parser = build_parser()
    assert config_from_args(parser.parse_args(["train", "--model", "switch-public-tiny"])).optim.lr == TINY_LR
    assert config_from_args(parser.parse_args(["train", "--model", "switch-public-tiny", "--lr", "0.1"])).optim.lr == 0.1


def _cli(*flags):
    c = config_from_args(build_parser().parse_args(["train", *flags]))
    return c.lora, c.optim.lr


def test_the_default_model_trains_lora_and_full_weights_are_one_flag_away():
    from raptor.data.model_source import DEFAULT_MODEL
    from raptor.training.config import PRETRAINED_LORA_LR, PRETRAINED_LR, TINY_LR

    assert build_parser().parse_args(["train"]).model == DEFAULT_MODEL == "minilm-moe"
    assert _cli() == (True, PRETRAINED_LORA_LR)
    assert _cli("--no-lora") == (False, PRETRAINED_LR)
    assert _cli("--no-lora", "--lr", "0.01") == (False, 0.01)
    assert _cli("--method", "dp-lora") == (False, PRETRAINED_LORA_LR)  # LoRA by its method: the flag stays off
    assert _cli("--method", "last-layer") == (False, PRETRAINED_LR)  # full weights of the last block by its method
    assert _cli("--method", "dpsgd-full") == (True, PRETRAINED_LORA_LR)
    assert _cli("--model", "switch_transformers") == (False, TINY_LR)
    assert _cli("--model", "switch_transformers", "--lora") == (True, TINY_LR)
    assert _cli("--recipe", "paper", "--no-lora")[0] is False


def test_the_library_default_recipe_matches_the_cli():
    from raptor.recipes import default_recipe

    for flags, kwargs in [((), {}), (("--no-lora",), {"lora": False}), (("--method", "dp-lora"), {"method": "dp-lora"}),
                          (("--model", "switch_transformers"), {"model": "switch_transformers"}),
                          (("--method", "nonprivate"), {"method": "nonprivate"})]:
        method = kwargs.pop("method", "raptor")
        c = default_recipe(method, **kwargs)
        assert (c.lora, c.optim.lr) == _cli(*flags), flags
        assert c.layers == "auto" and not c.freeze_head
