"""The reference's grid as a recipe (raptor.recipes.reference_grid_recipe): each reference method
at the batch size, learning rate, epochs and trainable set its grid gives it, on raptor's Poisson
sampling and joint accounting; and ``layers="all"`` (every MoE layer: the non-private upper bound)."""

from __future__ import annotations

import pytest
import torch
from tiny_records import DATA

from raptor.errors import ConfigError
from raptor.moe.models import TinySize, build_model
from raptor.recipes import REFERENCE_GRID, reference_grid_recipe
from raptor.training.config import PrivacyConfig, TrainConfig
from raptor.training.run.assemble import build_trainer

#: reference method -> (raptor method, B, lr, epochs): METHOD.md's table of the reference's grid
EXPECTED = {
    "upper_bound": ("nonprivate", 1024, 2e-4, 8.0),
    "naive_dp": ("dp-lora", 16, 1e-4, 5.0),
    "naive_dp_no_lora": ("dpsgd-full", 16, 2e-5, 5.0),
    "ours": ("raptor", 1024, 2e-4, 3.0),
    "baseline_a": ("dpsgd", 1024, 2e-4, 3.0),
    "baseline_b": ("shared-only", 1024, 2e-4, 3.0),
    "baseline_c": ("expert-only", 1024, 2e-4, 3.0),
    "baseline_e": ("last-layer", 1024, 2e-4, 3.0),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_reference_method_gets_its_own_settings(name):
    cfg = reference_grid_recipe(name, epsilon=1.0)
    assert (cfg.method, cfg.batch_size, cfg.optim.lr, cfg.epochs) == EXPECTED[name]
    assert (cfg.optim.name, cfg.optim.weight_decay, cfg.max_length) == ("adamw", 0.01, 128)
    assert (cfg.privacy.clip_shared, cfg.privacy.clip_expert, cfg.privacy.shared_ratio) == (1.0, 1.0, 0.3)
    assert cfg.privacy.epsilon == (None if name == "upper_bound" else 1.0)
    # the reference's methods that train the head keep it trainable; RAPTOR's set keeps it frozen
    assert cfg.freeze_head == (name in ("ours", "baseline_a", "baseline_b", "baseline_c"))
    assert cfg.lora == (name in ("upper_bound", "ours", "baseline_a", "baseline_b", "baseline_c"))
    assert cfg.layers == ("all" if name == "upper_bound" else "last")


def test_the_table_is_the_recipe_and_unknown_names_are_refused():
    assert set(REFERENCE_GRID) == set(EXPECTED)
    with pytest.raises(ConfigError, match="naive_dp"):
        reference_grid_recipe("naive-dp")
    cfg = reference_grid_recipe("naive_dp", seed=3, privacy=PrivacyConfig(epsilon=2.0, secure_rng=False))
    assert cfg.seed == 3 and cfg.privacy.epsilon == 2.0 and cfg.batch_size == 16


def test_layers_all_trains_every_moe_layer():
    model = build_model("switch_transformers", generator=torch.Generator().manual_seed(5),
                        size=TinySize(num_experts=4, top_k=1), num_labels=2)
    privacy = PrivacyConfig(epsilon=None, noise_multipliers=(1.0, 1.0), secure_rng=False)
    config = TrainConfig(method="raptor", steps=1, batch_size=8, seed=0, layers="all", max_length=16,
                         privacy=privacy)
    tr = build_trainer(config, model, train=DATA["train"], validation=DATA["validation"], public=DATA["public"])
    layers = [info.index for info in tr.engine.layers]
    assert len(layers) > 1 and list(tr.plan.trained_layers) == layers
    experts = {k.layer for k, v in tr.engine.group_map.groups.items() if k.is_expert and v}
    assert experts == set(layers)  # every layer's experts are in a clipping group
    with pytest.raises(ConfigError, match="'all'"):
        TrainConfig(layers="every")
