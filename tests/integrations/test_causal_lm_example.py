"""examples/own_loop_causal_lm.py runs tiny (a few private updates of a tiny causal MoE through
raptor.PrivacyEngine): its collator masks the prompt and the padding with -100, its loss is per
record, and the run spends the planned updates within the budget."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from raptor.errors import ConfigError

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "own_loop_causal_lm.py"


def _example():
    spec = importlib.util.spec_from_file_location("own_loop_causal_lm", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("family", ["qwen2_moe", "mixtral"])
def test_the_causal_lm_example_runs_tiny(family, capsys):
    out = _example().main(["--family", family, "--steps", "2", "--records", "40", "--batch-size", "8", "--seed", "0"])
    assert out["steps"] == 2 and 0 < out["epsilon"] <= 8
    assert out["held_out_loss_after"] == out["held_out_loss_after"]  # finite, not nan
    assert f"{family}: 2 private updates" in capsys.readouterr().out


def test_the_collator_masks_the_prompt_and_a_batch_mean_loss_is_refused():
    ex = _example()
    from raptor.data import train_wordpiece

    records = ex.make_records(8, 0)
    tok = train_wordpiece([f"{r['instruction']} : {r['response']}" for r in records] * 4, vocab_size=80)
    collate = ex.InstructionCollator(tok)
    batch = collate(records)
    for i, r in enumerate(records):
        prompt = len(tok(r["instruction"] + " :", add_special_tokens=False)["input_ids"])
        real = int(batch["attention_mask"][i].sum())
        assert (batch["labels"][i, :prompt] == ex.IGNORE).all() and (batch["labels"][i, prompt:real] != ex.IGNORE).all()
        assert (batch["labels"][i, real:] == ex.IGNORE).all()

    def batch_mean(logits, labels):  # divides by the batch's response tokens: couples the records
        per = ex.response_loss(logits, labels) * (labels[:, 1:] != ex.IGNORE).sum(dim=1)
        return per / (labels[:, 1:] != ex.IGNORE).sum()

    import raptor
    from raptor.moe.causal import build_causal_lm
    from raptor.moe.models import TinySize

    model = build_causal_lm("qwen2_moe", size=TinySize(vocab_size=len(tok), num_experts=4, top_k=2),
                            generator=torch.Generator().manual_seed(0))
    engine = raptor.PrivacyEngine(method="raptor", steps=1, batch_size=4, public=records, seed=0)
    with pytest.raises(ConfigError, match="couples records"):
        engine.make_private(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                            data_loader=torch.utils.data.DataLoader(ex.make_records(20, 1), collate_fn=collate),
                            loss_fn=batch_mean)
