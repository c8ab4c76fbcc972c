"""Generative fine-tuning through the library, without the CLI: ``raptor.fine_tune`` on QA records."""

from __future__ import annotations

import pytest
import torch

import raptor
from raptor.data.qa import QAData
from raptor.data.tokenization import train_wordpiece
from raptor.errors import ConfigError
from raptor.moe.models import TinySize
from raptor.training.config import check_batch_size

COLOURS = ("red", "blue", "green")


def _qa(n: int, offset: int = 0) -> QAData:
    return QAData(tuple(f"colour of item {i}?" for i in range(offset, offset + n)),
                  tuple(COLOURS[i % 3] for i in range(offset, offset + n)), source="qa")


def _model(public: QAData):
    from raptor.moe.causal import build_causal_lm

    tok = train_wordpiece(public.corpus(), vocab_size=60, lowercase=True, min_frequency=1)
    size = TinySize(vocab_size=max(len(tok), 8), hidden_size=16, num_layers=2, num_heads=4, num_experts=4,
                    top_k=2, expert_intermediate=32, max_positions=256)
    return build_causal_lm("olmoe", size=size, generator=torch.Generator().manual_seed(0)), tok


def test_fine_tune_runs_generation_without_the_cli(tmp_path):
    train, dev = _qa(50), _qa(4, offset=50)
    model, tok = _model(train)
    config = raptor.tiny_recipe("raptor", steps=2, output_dir=str(tmp_path / "run"))
    out = raptor.fine_tune(model, tok, train, dev, config, public_size=10, max_new_tokens=2, progress=False)
    res = out.results
    assert res["objective"] == "generate" and res["steps"] == 2 and 0 < res["epsilon"] <= 8
    assert res["data"]["private_records"] == 40 and res["data"]["public_records"] == 10
    assert res["data"]["public_source"]["kind"] == "slice" and res["zero_shot"]["records"] == 4
    assert 0.0 <= res["final_exact_match"] <= 1.0 and res["trained_layers"]
    assert out.trainer.state.step == 2 and out.tokenizer is tok


def test_fine_tune_generation_needs_a_declared_public_source(tmp_path):
    train = _qa(30)
    model, tok = _model(train)
    config = raptor.tiny_recipe("raptor", steps=1, batch_size=4, output_dir=str(tmp_path / "run"))
    with pytest.raises(ConfigError, match="no public data declared"):
        raptor.fine_tune(model, tok, train, None, config, progress=False)
    with pytest.raises(ConfigError, match="freeze_shared_experts applies to generative"):
        raptor.fine_tune(model, tok, [{"sentence": "a", "label": 0}] * 4, None, config, freeze_shared_experts=True)


@pytest.mark.parametrize("batch_size,n", [(10, 10), (11, 10)])
def test_one_batch_size_rule_refuses_q_of_one_or_more(batch_size, n):
    from raptor.training.config import TrainConfig
    from raptor.training.methods import METHOD_SPECS
    from raptor.training.step.noise_plans import make_noise_plan

    with pytest.raises(ConfigError, match=rf"batch_size {batch_size} \(--batch-size\) must be below the {n} private records"):
        check_batch_size(batch_size, n)
    with pytest.raises(ConfigError, match="must be below"):  # make_noise_plan used to accept q = 1
        make_noise_plan(TrainConfig(method="dpsgd", steps=1, batch_size=batch_size), METHOD_SPECS["dpsgd"],
                        dataset_size=n, num_layers=1)


def test_the_batch_size_rule_accepts_below_n_and_refuses_zero():
    check_batch_size(9, 10)
    with pytest.raises(ConfigError, match="at least 1"):
        check_batch_size(0, 10)
