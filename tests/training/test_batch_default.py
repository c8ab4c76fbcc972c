"""Issue 15 item 9: one batch-size default for the library and the CLI (N/10, at least 8, at most
1024, below N), applied only when none is given; issue 34: resolved in one place, the run's assembly."""

from __future__ import annotations

import pytest
import torch

from raptor.cli.main import build_parser
from raptor.cli.train import config_from_args
from raptor.errors import ConfigError
from raptor.training.config import TrainConfig, default_batch_size, resolve_batch_size


def test_default_batch_size_values():
    assert [default_batch_size(n) for n in (2, 9, 50, 80, 300, 5_000, 10_240, 67_349)] == \
        [1, 8, 8, 8, 30, 500, 1024, 1024]
    for n in range(2, 400):
        assert 1 <= default_batch_size(n) < n  # q = B/N < 1 on any data set of 2 records or more
    with pytest.raises(ConfigError, match="integer >= 0"):
        default_batch_size(-1)


def test_library_default_is_resolved_from_the_data_and_explicit_values_are_kept():
    assert TrainConfig().batch_size is None
    assert resolve_batch_size(TrainConfig(), 300).batch_size == 30
    explicit = TrainConfig(batch_size=64)
    assert resolve_batch_size(explicit, 300) is explicit
    with pytest.raises(ConfigError, match=r"batch_size 1024 \(--batch-size\) must be below the 300 private records"):
        resolve_batch_size(TrainConfig(batch_size=1024), 300)  # the user's choice, refused by name
    assert TrainConfig(epochs=2.0).num_steps(300) == 2 * 10  # T from the default B = 30
    with pytest.raises(ConfigError, match="batch_size must be an integer >= 1"):
        TrainConfig(batch_size=0)


@pytest.mark.parametrize("flags,expected", [([], 30), (["--batch-size", "64"], 64)])
def test_cli_uses_the_same_function(flags, expected):
    args = build_parser().parse_args(["train", "--model", "switch_transformers", *flags])
    assert config_from_args(args).batch_size == (None if not flags else 64)  # the run resolves it
    assert resolve_batch_size(config_from_args(args), 300).batch_size == expected


def test_build_trainer_refuses_an_unresolved_batch_size():
    from raptor.training.run.assemble import build_trainer

    with pytest.raises(ConfigError, match="assemble_run"):
        build_trainer(TrainConfig(), torch.nn.Linear(1, 1), train={"labels": torch.zeros(10)}, validation=None,
                      public={})


def test_fine_tune_without_a_batch_size_uses_the_cli_default():
    import raptor
    from raptor.data import train_wordpiece
    from raptor.moe.models import TinySize, build_model

    words = ["good", "bad", "great", "awful", "fine", "poor"]
    train = [{"sentence": f"the {words[i % 6]} plot", "label": i % 2} for i in range(120)]
    tok = train_wordpiece([f"the {w} plot movie" for w in words], vocab_size=60)
    model = build_model("switch_transformers", generator=torch.Generator().manual_seed(0),
                        size=TinySize(vocab_size=len(tok), hidden_size=16))
    config = raptor.TrainConfig(method="nonprivate", steps=1, max_length=8, seed=0,
                                privacy=raptor.PrivacyConfig(epsilon=None, secure_rng=False))
    out = raptor.fine_tune(model, tok, train, None, config, progress=False)
    args = build_parser().parse_args(["train"])
    assert out.trainer.config.batch_size == resolve_batch_size(config_from_args(args), 120).batch_size == \
        default_batch_size(120) == 12
    assert out.results["config"]["batch_size"] == 12 and out.trainer.sample_rate == pytest.approx(0.1)
