"""--lora-rank reaches the config of every objective (classification ignored it once), and the
learning-rate default follows the model kind."""

from __future__ import annotations

from raptor.cli.main import build_parser
from raptor.cli.train import config_from_args


def test_lora_rank_flag_reaches_the_classification_config():
    parser = build_parser()
    assert config_from_args(parser.parse_args(["train", "--method", "dp-lora"])).lora_rank == 8
    assert config_from_args(parser.parse_args(["train", "--method", "dp-lora", "--lora-rank", "4"])).lora_rank == 4


def test_default_lr_by_model_kind():
    from raptor.cli.train import PRETRAINED_LR, TINY_LR, default_lr
    from raptor.shipped import available

    assert default_lr("switch_transformers") == TINY_LR
    assert available() and all(default_lr(name) == TINY_LR for name in available())  # the shipped warm start is tiny
    assert default_lr("/some/saved/model") == PRETRAINED_LR and default_lr("allenai/OLMoE-1B-7B-0924") == PRETRAINED_LR
    parser = build_parser()
    assert config_from_args(parser.parse_args(["train", "--model", available()[0]])).optim.lr == TINY_LR
    assert config_from_args(parser.parse_args(["train", "--model", available()[0], "--lr", "0.1"])).optim.lr == 0.1
