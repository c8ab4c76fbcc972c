"""One update of the own-loop path (PrivacyEngine: Poisson loader, loss.backward(), optimizer.step())
releases exactly what ``Trainer.step`` releases: the same clipped sums, the same noisy gradients,
the same ledger event and the same updated weights, for raptor and dpsgd, on a fused-expert family
(OLMoE) and on bert_moe."""

from __future__ import annotations

import pytest
import torch
from tiny import PUBLIC, TRAIN, ItemDataset, ReleaseSpy, assert_same_tensors, tiny_model

import raptor.training.step.release as release_module
import raptor.training.step.trainer as trainer_module
from raptor.integrations import PrivacyEngine
from raptor.recipes import tiny_recipe
from raptor.training.config import resolve_batch_size, resolve_optim
from raptor.training.run.assemble import build_trainer


def user_loss(logits, labels):
    """The user's own per-record loss (written here, not raptor's)."""
    return torch.nn.functional.cross_entropy(logits, labels, reduction="none")


def _reference(config, family, monkeypatch, steps):
    spy = ReleaseSpy(monkeypatch, trainer_module)
    cfg = resolve_optim(resolve_batch_size(config, int(TRAIN["labels"].shape[0])))
    tr = build_trainer(cfg, tiny_model(family), train=TRAIN, validation=None, public=PUBLIC, loss_fn=user_loss)
    for _ in range(steps):
        tr.step()
    return tr, spy


def _own_loop(config, family, monkeypatch, steps, hyper):
    spy = ReleaseSpy(monkeypatch, release_module)
    model = tiny_model(family)
    optimizer = torch.optim.AdamW(model.parameters(), **hyper)
    loader = torch.utils.data.DataLoader(ItemDataset(TRAIN), batch_size=8, shuffle=True)
    engine = PrivacyEngine(config=config, public=PUBLIC)
    pmodel, popt, ploader = engine.make_private(model=model, optimizer=optimizer, data_loader=loader,
                                                loss_fn=user_loss)
    assert len(ploader) == config.steps
    for t, batch in enumerate(ploader):
        if t == steps:
            break
        loss = pmodel(**batch)
        loss.backward()
        popt.step()
        popt.zero_grad()
    return engine, model, spy


@pytest.mark.parametrize("family", ["olmoe", "bert_moe"])
@pytest.mark.parametrize("method", ["raptor", "dpsgd"])
def test_one_update_releases_exactly_what_trainer_step_releases(family, method, monkeypatch):
    config = tiny_recipe(method, steps=3, batch_size=8)
    ref, ref_spy = _reference(config, family, monkeypatch, steps=2)
    group = ref.optimizers["shared"].param_groups[0]
    hyper = {k: group[k] for k in ("lr", "betas", "eps", "weight_decay")}
    engine, model, spy = _own_loop(config, family, monkeypatch, steps=2, hyper=hyper)
    assert len(spy.calls) == len(ref_spy.calls) == 2
    for (sums, grads), (ref_sums, ref_grads) in zip(spy.calls, ref_spy.calls, strict=True):
        assert_same_tensors(sums, ref_sums)     # the clipped sums of the same Poisson sample
        assert_same_tensors(grads, ref_grads)   # the same noise, divided by the same public n_hat
    assert any(v.abs().sum() > 0 for v in spy.calls[0][0].values()), "the sample had records"
    assert engine._run.ledger.to_dict() == ref.ledger.to_dict()  # the same ledger events
    assert engine.epsilon() == ref.epsilon_spent() and 0 < engine.epsilon() < 8
    assert engine.steps_done == 2 and engine.steps == ref.plan.steps
    ref_params = dict(ref.model.named_parameters())
    for name, p in model.named_parameters():  # the user's AdamW took the same update as the stream optimizers
        assert torch.equal(p, ref_params[name]), name
