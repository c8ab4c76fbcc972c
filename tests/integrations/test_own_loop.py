"""The own-loop path's contract: the user's code reads no private statistic (a planted read of the
realized owner counts, the loss value, the engine's result), refused losses and loops, checkpoint
and resume continue exactly, and the budget stop saves the run before it raises."""

from __future__ import annotations

import gc

import pytest
import torch
from tiny import PUBLIC, TRAIN, ItemDataset, ReleaseSpy, assert_same_tensors, tiny_model

import raptor
import raptor.training.step.release as release_module
from raptor.errors import BudgetExceededError, ConfigError, PrivacyError
from raptor.per_sample.engine import EngineResult
from raptor.recipes import tiny_recipe


def _setup(method="raptor", loss_fn=None, steps=3, **engine_kw):
    model = tiny_model("olmoe")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(ItemDataset(TRAIN), batch_size=4)
    engine = raptor.PrivacyEngine(config=tiny_recipe(method, steps=steps, batch_size=8), public=PUBLIC, **engine_kw)
    return (engine, *engine.make_private(model=model, optimizer=optimizer, data_loader=loader, loss_fn=loss_fn))


def test_a_realized_count_read_in_the_user_loop_finds_nothing():
    engine, model, optimizer, loader = _setup()
    batch = next(iter(loader))
    loss = model(**batch)
    loss.backward()
    gc.collect()
    # the engine's per-record result (owners, norms, losses, clip factors) is not kept anywhere
    assert not [o for o in gc.get_objects() if type(o) is EngineResult]
    planted = [lambda: loss.owners, lambda: loss.owner_counts, lambda: loss.value, lambda: engine.owner_counts,
               lambda: optimizer.owner_counts, lambda: model.owner_counts, lambda: engine.last_result]
    for read in planted:
        with pytest.raises(AttributeError):
            read()
    for read in (loss.item, lambda: float(loss)):
        with pytest.raises(PrivacyError, match="private statistic"):
            read()
    optimizer.step()
    public = {k for k in dir(engine) if not k.startswith("_")} | {k for k in vars(optimizer) if not k.startswith("_")}
    assert not [k for k in public if "owner" in k or "count" in k or "loss" in k]
    assert engine.steps_done == 1 and engine.epsilon() > 0


def test_batch_coupled_and_scalar_losses_are_refused():
    with pytest.raises(ConfigError, match="one loss per record"):
        _setup(loss_fn=lambda logits, labels: torch.nn.functional.cross_entropy(logits, labels))
    with pytest.raises(ConfigError, match="couples records"):
        _setup(loss_fn=lambda logits, labels: torch.nn.functional.cross_entropy(logits, labels, reduction="none")
               / labels.shape[0])


def test_a_gradient_that_bypasses_the_release_is_refused_and_the_loop_order_is_enforced():
    engine, model, optimizer, loader = _setup()
    it = iter(loader)
    batch = next(it)
    with pytest.raises(ConfigError, match="before loss.backward"):
        optimizer.step()
    with pytest.raises(ConfigError, match="not released"):
        next(it)
    model(**batch).backward()
    with pytest.raises(ConfigError, match="twice"):
        model(**batch).backward()
    model.module(**{k: v for k, v in batch.items() if k != "labels"}).logits.sum().backward()  # the user's own
    with pytest.raises(PrivacyError, match="did not come from the private release"):
        optimizer.step()


def test_checkpoint_and_resume_continue_exactly(tmp_path, monkeypatch):
    engine, model, optimizer, loader = _setup()
    spy = ReleaseSpy(monkeypatch, release_module)
    for t, batch in enumerate(loader):
        model(**batch).backward()
        optimizer.step()
        optimizer.zero_grad()
        if t == 0:
            engine.save_checkpoint(tmp_path / "ckpt")
    assert len(spy.calls) == 3
    full_eps = engine.epsilon()
    engine2, model2, optimizer2, loader2 = _setup()
    engine2.load_checkpoint(tmp_path / "ckpt")
    assert len(loader2) == 2 and engine2.steps_done == 1
    for batch in loader2:
        model2(**batch).backward()
        optimizer2.step()
    assert len(spy.calls) == 5
    for got, want in zip(spy.calls[3:], spy.calls[1:3], strict=True):
        assert_same_tensors(got[0], want[0])
        assert_same_tensors(got[1], want[1])
    assert engine2.epsilon() == full_eps
    for (n, p), (_, q) in zip(model.module.named_parameters(), model2.module.named_parameters(), strict=True):
        assert torch.equal(p, q), n


def test_the_budget_stop_saves_the_run_then_raises(tmp_path, budget_runs_out):
    budget_runs_out(2)
    engine, model, optimizer, loader = _setup(checkpoint_dir=tmp_path / "stop")
    done = 0
    with pytest.raises(BudgetExceededError):
        for batch in loader:
            model(**batch).backward()
            optimizer.step()
            done += 1
    assert done == 2 and engine.steps_done == 2
    assert (tmp_path / "stop" / "state.json").is_file()
    engine2, _, _, loader2 = _setup()
    engine2.load_checkpoint(tmp_path / "stop")
    assert engine2.steps_done == 2 and len(loader2) == 1


def test_public_records_are_required_and_may_be_items_of_the_dataset():
    model = tiny_model("olmoe")
    with pytest.raises(ConfigError, match="public"):
        raptor.PrivacyEngine(config=tiny_recipe("raptor")).make_private(
            model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), data_loader=ItemDataset(TRAIN))
    items = [ItemDataset(PUBLIC)[i] for i in range(16)]
    model = tiny_model("olmoe")
    engine = raptor.PrivacyEngine(config=tiny_recipe("dpsgd", steps=1, batch_size=8), public=items)
    pmodel, popt, loader = engine.make_private(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                                               data_loader=ItemDataset(TRAIN))
    for batch in loader:
        pmodel(**batch).backward()
        popt.step()
    assert engine.steps_done == 1 and engine.sigmas["shared"] > 0
