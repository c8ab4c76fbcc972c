"""--lora [RANK] reaches the config of every objective (classification ignored the rank once; one flag
since issue 34: a rank implies LoRA), and the learning-rate default follows the model kind."""

from __future__ import annotations

from raptor.cli.main import build_parser
from raptor.cli.train import config_from_args


def test_lora_rank_flag_reaches_the_classification_config():
    parser = build_parser()

    def config(*flags):
        c = config_from_args(parser.parse_args(["train", *flags]))
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
        build_parser().parse_args(["train", "--lora", "big"])
    assert "the LoRA rank must be an integer, got 'big'" in capsys.readouterr().err


def test_default_lr_by_model_kind():
    from raptor.shipped import available
    from raptor.training.config import PRETRAINED_LR, TINY_LR, default_lr

    assert default_lr("switch_transformers") == TINY_LR
    assert available() and all(default_lr(name) == TINY_LR for name in available())  # the shipped warm start is tiny
    assert default_lr("/some/saved/model") == PRETRAINED_LR and default_lr("allenai/OLMoE-1B-7B-0924") == PRETRAINED_LR
    parser = build_parser()
    assert config_from_args(parser.parse_args(["train", "--model", available()[0]])).optim.lr == TINY_LR
    assert config_from_args(parser.parse_args(["train", "--model", available()[0], "--lr", "0.1"])).optim.lr == 0.1
