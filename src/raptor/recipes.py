"""Recipes: functions that return a typed :class:`~raptor.training.config.TrainConfig`.

The reference's grid (:func:`reference_grid_recipe`): each method of the reference code at the
batch size, learning rate, epochs and trainable set its grid script gives it (``../shared/METHOD.md``,
"The reference's grid"), run on raptor's machinery: Poisson sampling with a fixed number of
updates and the joint accountant for every method (the reference's shuffled fixed-size batches
accounted as Poisson are a bug, not a setting to copy), and raptor's delta (the caller's), not 1/N.

| reference method     | raptor method | trainable set                                    | B    | lr   | epochs |
|----------------------|---------------|--------------------------------------------------|------|------|--------|
| ``upper_bound``      | nonprivate    | LoRA on attention + every MoE layer's experts, head | 1024 | 2e-4 | 8   |
| ``naive_dp``         | dp-lora       | the same set, one clip, one sigma                | 16   | 1e-4 | 5      |
| ``naive_dp_no_lora`` | dpsgd-full    | full weights but routers, head; one clip         | 16   | 2e-5 | 5      |
| ``ours``             | raptor        | attention LoRA + last layer's expert LoRA; head frozen | 1024 | 2e-4 | 3 |
| ``baseline_a``       | dpsgd         | RAPTOR's set, one clip, one sigma                | 1024 | 2e-4 | 3      |
| ``baseline_b``       | shared-only   | RAPTOR's shared stream only (attention LoRA)     | 1024 | 2e-4 | 3      |
| ``baseline_c``       | expert-only   | RAPTOR's expert streams only                     | 1024 | 2e-4 | 3      |
| ``baseline_e``       | last-layer    | the last MoE block + head (full weights here: raptor has no LoRA variant of it) | 1024 | 2e-4 | 3 |

Not here: ``upper_bound_no_lora`` (non-private full fine-tuning at B 64, a ceiling the DP table does
not need) and ``dpsft`` (two-stage DP-SFT in the top-8 SVD subspace of a DP trajectory: a
different mechanism with its own budget split, which raptor does not implement).
C_s = C_e = 1, AdamW (0.9, 0.999, wd 0.01), constant learning rate, max length 128, RAPTOR's
shared ratio 0.3, as in the reference.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from raptor.errors import ConfigError
from raptor.training.config import OptimConfig, PrivacyConfig, TrainConfig


@dataclass(frozen=True)
class GridSetting:
    """One method of the reference's grid: what raptor runs for it, and at which settings."""

    method: str          # raptor's method
    batch_size: int      # expected Poisson batch B
    lr: float
    epochs: float
    lora: bool
    freeze_head: bool
    layers: str          # "last" | "all"


#: the reference's method name -> its settings (the module docstring's table)
REFERENCE_GRID: dict[str, GridSetting] = {
    "upper_bound": GridSetting("nonprivate", 1024, 2e-4, 8.0, lora=True, freeze_head=False, layers="all"),
    "naive_dp": GridSetting("dp-lora", 16, 1e-4, 5.0, lora=False, freeze_head=False, layers="last"),
    "naive_dp_no_lora": GridSetting("dpsgd-full", 16, 2e-5, 5.0, lora=False, freeze_head=False, layers="last"),
    "ours": GridSetting("raptor", 1024, 2e-4, 3.0, lora=True, freeze_head=True, layers="last"),
    "baseline_a": GridSetting("dpsgd", 1024, 2e-4, 3.0, lora=True, freeze_head=True, layers="last"),
    "baseline_b": GridSetting("shared-only", 1024, 2e-4, 3.0, lora=True, freeze_head=True, layers="last"),
    "baseline_c": GridSetting("expert-only", 1024, 2e-4, 3.0, lora=True, freeze_head=True, layers="last"),
    "baseline_e": GridSetting("last-layer", 1024, 2e-4, 3.0, lora=False, freeze_head=False, layers="last"),
}


def reference_grid_recipe(reference_method: str, *, epsilon: float | None = 8.0, **overrides) -> TrainConfig:
    """The config raptor runs for ``reference_method`` of the reference's grid (:data:`REFERENCE_GRID`).

    ``epsilon`` is ignored for the non-private ``upper_bound``; ``overrides`` replace TrainConfig
    fields (seed, output_dir, ...). dp-lora trains LoRA by definition (its ``lora`` flag stays
    False: the flag means "LoRA on the roles-built set"), and so does the reference's naive_dp."""
    setting = REFERENCE_GRID.get(reference_method)
    if setting is None:
        raise ConfigError(f"reference_grid_recipe: unknown reference method {reference_method!r}; "
                          f"one of {sorted(REFERENCE_GRID)}")
    private = setting.method != "nonprivate"
    cfg = TrainConfig(method=setting.method, epochs=setting.epochs, batch_size=setting.batch_size,
                      max_length=128, layers=setting.layers, lora=setting.lora, freeze_head=setting.freeze_head,
                      privacy=PrivacyConfig(epsilon=epsilon if private else None, clip_shared=1.0, clip_expert=1.0,
                                            shared_ratio=0.3),
                      optim=OptimConfig(name="adamw", lr=setting.lr, weight_decay=0.01))
    return replace(cfg, **overrides) if overrides else cfg
