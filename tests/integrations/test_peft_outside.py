"""A model its user wrapped with ``peft.get_peft_model(model, LoraConfig(...))`` outside raptor goes
through the own-loop path as built: the user's adapters are what trains, the run's own per-record
engine matches the one-record oracle on it (``raptor check``'s comparison), and what a PEFT model
cannot release privately is refused."""

from __future__ import annotations

import warnings

import pytest
import torch
from tiny import PUBLIC, TRAIN, ItemDataset, tiny_model

import raptor
from raptor.errors import ConfigError
from raptor.recipes import tiny_recipe


def _peft(family: str, targets, **lora):
    from peft import LoraConfig, get_peft_model

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # PEFT reads a deprecated transformers attribute
        return get_peft_model(tiny_model(family), LoraConfig(task_type="SEQ_CLS", target_modules=targets, r=4,
                                                             lora_alpha=8, **lora))


def _private(model, method: str):
    engine = raptor.PrivacyEngine(config=tiny_recipe(method, steps=2, batch_size=8), public=PUBLIC)
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    return (engine, *engine.make_private(model=model, optimizer=optimizer, data_loader=ItemDataset(TRAIN)))


@pytest.mark.parametrize(("family", "targets", "method"), [
    ("bert_moe", ["q_proj", "v_proj", "wi", "wo"], "raptor"),  # per-expert Linear layers take PEFT LoRA
    ("olmoe", ["q_proj", "v_proj"], "dpsgd"),                  # fused experts: an attention-only adapter
])
def test_a_peft_model_built_outside_passes_the_oracle_check_and_trains(family, targets, method):
    model = _peft(family, targets)
    chosen = {n for n, p in model.named_parameters() if p.requires_grad}
    engine, pmodel, optimizer, loader = _private(model, method)
    assert pmodel.module is model  # the user's PEFT model itself, not a re-wrapped one
    trained = set(engine._run.params)
    assert trained and trained <= chosen and all("lora_" in n or "modules_to_save" in n for n in trained)
    if method == "raptor":
        assert any(".experts." in n for n in trained), "the user's expert adapters are released per expert"
    report = engine.check(records=2)  # two public records: one clipped, one not, in most groups
    assert report.passed, report.to_dict()
    assert report.clipped_groups > 0
    before = {n: p.detach().clone() for n, p in model.named_parameters() if n in trained}
    for batch in loader:
        pmodel(**batch).backward()
        optimizer.step()
        optimizer.zero_grad()
    assert engine.steps_done == 2 and 0 < engine.epsilon() <= 8
    assert any(not torch.equal(before[n], p) for n, p in model.named_parameters() if n in trained)


def test_what_a_peft_model_cannot_release_privately_is_refused():
    with pytest.raises(ConfigError, match="no expert parameter"):
        _private(_peft("olmoe", ["q_proj", "v_proj"]), "raptor")
    with pytest.raises(ConfigError, match="lora_dropout"):
        _private(_peft("bert_moe", ["q_proj", "v_proj"], lora_dropout=0.1), "dpsgd")
