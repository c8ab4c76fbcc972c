"""--lora-rank reaches the config of every objective (classification ignored it once) and so the
run's fingerprint: a changed rank on --resume is a changed run."""

from __future__ import annotations

from raptor.cli.main import build_parser
from raptor.cli.train import config_from_args


def test_lora_rank_flag_reaches_the_classification_config():
    parser = build_parser()
    assert config_from_args(parser.parse_args(["train", "--method", "dp-lora"])).lora_rank == 8
    assert config_from_args(parser.parse_args(["train", "--method", "dp-lora", "--lora-rank", "4"])).lora_rank == 4
