"""experiments/run_grid.py --space reference: every method at the reference grid's own settings
(raptor.recipes.REFERENCE_GRID), one fixed configuration each (no tuning stage), and the config a
cell builds is the recipe's."""

from __future__ import annotations

import pytest

from raptor.analysis.grid import Cell
from raptor.errors import ConfigError
from raptor.recipes import reference_grid_recipe

GRID_TO_REFERENCE = {"raptor": "ours", "nonprivate": "upper_bound", "naive_dp": "naive_dp",
                     "naive_dp_no_lora": "naive_dp_no_lora", "baseline_a": "baseline_a", "baseline_b": "baseline_b",
                     "baseline_c": "baseline_c", "baseline_e": "baseline_e"}


@pytest.fixture()
def rg(experiment_script, monkeypatch):
    mod = experiment_script("run_grid")
    monkeypatch.setattr(mod, "SPACE", "reference")
    return mod


@pytest.mark.parametrize("method", sorted(GRID_TO_REFERENCE))
def test_a_cell_builds_the_reference_recipe(rg, method):
    assert not rg.tuned(method)  # one configuration: no tuning stage
    fx = rg.Fixed(model_dir="m", data_dir="d", max_train=4000, batch_size=256, epochs=2.0)
    eps = None if method == "nonprivate" else 1.0
    cell = Cell(model="m@x", task="sst2", method=method, epsilon=eps, seed=0, stage="final",
                hparams=rg.fixed_choice(("m@x", "sst2", method, eps), fx))
    got = rg.build_config(cell, fx, 1.0, 1.0)
    want = reference_grid_recipe(GRID_TO_REFERENCE[method], epsilon=eps)
    for field in ("method", "batch_size", "epochs", "lora", "freeze_head", "layers"):
        assert getattr(got, field) == getattr(want, field), field  # the grid's B and epochs do not leak in
    assert (got.optim.lr, got.optim.weight_decay) == (want.optim.lr, want.optim.weight_decay)
    assert (got.privacy.clip_shared, got.privacy.clip_expert, got.privacy.shared_ratio) == (1.0, 1.0, 0.3)
    assert got.privacy.epsilon == eps


def test_budget_and_refusal_outside_the_space(rg, monkeypatch):
    assert rg.check_matched_budget(list(GRID_TO_REFERENCE)) == 1
    with pytest.raises(ConfigError, match="--space reference runs"):
        rg.search_space("dpsgd")  # the reference grid has no dpsgd of its own (its baseline_a is raptor's dpsgd)
    monkeypatch.setattr(rg, "SPACE", "minilm")
    with pytest.raises(ConfigError, match="--space reference"):
        rg.search_space("naive_dp")
