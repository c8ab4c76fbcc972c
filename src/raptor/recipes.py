"""Recipes: functions that return a typed :class:`~raptor.training.config.TrainConfig` (the one
source of every named set of settings; ``raptor train --recipe NAME``, ``raptor demo`` and the
experiment grids call them, and a flag or field given explicitly replaces what they set).

* :func:`default_recipe`: the library's defaults, with the learning rate of the model's kind
  (:func:`raptor.training.config.default_lr`: a tiny model or a pre-trained one);
* :func:`reference_recipe` (``--recipe paper``): the reference's protocol;
* :func:`tiny_recipe`: a seconds-long seeded CPU run, for tests;
* :func:`demo_recipe` (``raptor demo --model NAME``): the demo's settings per model, a
  :class:`DemoRecipe` (the config and the demo's public-data and head settings);
* :func:`reference_grid_recipe`: the reference's grid, method by method;
* :func:`grid_recipe`: the base of an experiment grid's cell (experiments/run_grid.py), whose
  settings replace its fields;
* :data:`VARIANT_RECIPES`: named variants, a library method at fixed settings with its own row in
  the experiments' tables (``raptor-split``: :func:`raptor_split_recipe`).

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
from raptor.training.config import (
    DEFAULT_MODEL,
    OptimConfig,
    PerformanceConfig,
    PrivacyConfig,
    TrainConfig,
    check_model_kind,
    default_train_config,
    default_weight_decay,
    is_private,
    lora_rule,
    replace_fields,
)


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



def _with(cfg: TrainConfig, overrides: dict) -> TrainConfig:
    """``cfg`` with its top-level fields replaced; an unknown keyword is a ConfigError naming it
    (and the nested config it belongs to, or the closest field), not a TypeError."""
    import difflib
    import inspect
    from dataclasses import fields

    from raptor.errors import ConfigError
    from raptor.training.config import OptimConfig, PerformanceConfig, PrivacyConfig

    known = {f.name for f in fields(TrainConfig)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        name, caller = unknown[0], inspect.stack()[1].function
        nested = {f.name: cls for cls in (PrivacyConfig, OptimConfig, PerformanceConfig) for f in fields(cls)}
        if name in nested:
            section = next(f.name for f in fields(TrainConfig) if f.type in (nested[name].__name__, nested[name]))
            hint = (f"{name} is a field of {nested[name].__name__}: use "
                    f"raptor.training.config.replace_fields(config, {{'{section}.{name}': ...}})")
        else:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"did you mean {close[0]}=?" if close else f"the fields: {', '.join(sorted(known))}"
        raise ConfigError(f"{caller}() got an unknown keyword argument {name}=; {hint}")
    return replace(cfg, **overrides) if overrides else cfg

def reference_grid_recipe(reference_method: str, *, epsilon: float | None = 8.0, **overrides) -> TrainConfig:
    """The config raptor runs for ``reference_method`` of the reference's grid (:data:`REFERENCE_GRID`).

    ``epsilon`` is ignored for the non-private ``upper_bound``; ``overrides`` replace TrainConfig
    fields (seed, output_dir, ...). dp-lora trains LoRA by definition (its ``lora`` flag stays
    False: the flag means "LoRA on the roles-built set"), and so does the reference's naive_dp."""
    setting = REFERENCE_GRID.get(reference_method)
    if setting is None:
        raise ConfigError(f"reference_grid_recipe: unknown reference method {reference_method!r}; "
                          f"one of {sorted(REFERENCE_GRID)}")
    private = is_private(setting.method)
    cfg = TrainConfig(method=setting.method, epochs=setting.epochs, batch_size=setting.batch_size,
                      max_length=128, layers=setting.layers, lora=setting.lora, freeze_head=setting.freeze_head,
                      privacy=PrivacyConfig(epsilon=epsilon if private else None, clip_shared=1.0, clip_expert=1.0,
                                            shared_ratio=0.3),
                      optim=OptimConfig(name="adamw", lr=setting.lr, weight_decay=0.01))
    return _with(cfg, overrides)


def default_recipe(method: str = "raptor", model: str | None = DEFAULT_MODEL, **overrides) -> TrainConfig:
    """The library's defaults for ``method`` on ``model`` (epsilon 8, secure randomness, AdamW, the
    public layer rule ``layers="auto"``, the head trained in the shared stream), with LoRA r 8 on a
    pre-trained model (:func:`~raptor.training.config.method_default_lora`) and the learning rate
    of the model's kind and of LoRA or full weights (:func:`~raptor.training.config.default_lr`:
    5e-3 under LoRA, 2e-4 on full weights, 3e-3 for a tiny model). ``model=None``: a pre-trained
    model passed in without a name, on full weights. Full fine-tuning of the default model is
    ``default_recipe(method, lora=False)`` (its lr then follows: 2e-4)."""
    check_model_kind(model)
    cfg = default_train_config(method, model, lora=overrides.pop("lora", None))
    return _with(cfg, overrides)


def reference_recipe(method: str = "raptor", **overrides) -> TrainConfig:
    """The reference's protocol (``--recipe paper``; METHOD.md and docs/METHOD.md's table): the
    label-word head FROZEN, LoRA r 8 (alpha 16) on attention and on the experts of the trained
    layer (every method built from roles; dp-lora as always), the LAST sparse layer, B 1024,
    AdamW lr 2e-4 (0.9, 0.999, wd 0.01), 3 epochs, C_s = C_e = 1, epsilon 8, shared ratio 0.3,
    max length 128. ``dpsgd`` is then the reference's matched baseline (same parameters, one clip,
    one sigma, same Poisson schedule) and ``dpsgd-full`` its naive one. Head initialisation is the
    caller's (``--head-init label-words``); a frozen random head is allowed but rarely useful."""
    cfg = TrainConfig(method=method, epochs=3.0, batch_size=1024, max_length=128, layers="last",
                      lora=lora_rule(method) == "optional", freeze_head=True,
                      privacy=PrivacyConfig(epsilon=8.0 if is_private(method) else None, clip_shared=1.0,
                                            clip_expert=1.0, shared_ratio=0.3),
                      optim=OptimConfig(name="adamw", lr=2e-4))
    return _with(cfg, overrides)


def tiny_recipe(method: str = "raptor", **overrides) -> TrainConfig:
    """A seconds-long CPU run for tests: seeded (NOT secure), B 8, 3 steps, micro-batch 4."""
    cfg = TrainConfig(method=method, steps=3, batch_size=8, seed=0, max_length=16, layers="auto",
                      privacy=PrivacyConfig(epsilon=8.0 if is_private(method) else None, secure_rng=False),
                      performance=PerformanceConfig(micro_batch_size=4, eval_batch_size=16),
                      optim=OptimConfig(lr=1e-3))
    return _with(cfg, overrides)


#: named recipes (``raptor train --recipe NAME``): functions of the method returning a TrainConfig
RECIPES = {"paper": reference_recipe}


def raptor_split_recipe(**overrides) -> TrainConfig:
    """``raptor-split``: RAPTOR under the reference's protocol (:func:`reference_recipe`) with the
    head trained, in its own clipping group of the shared stream (``PrivacyConfig.shared_split``
    ``"head"``). ``overrides``: fields, dotted paths allowed (``"optim.lr"``)."""
    return replace_fields(reference_recipe("raptor"), {"freeze_head": False, "privacy.shared_split": "head",
                                                       **overrides})


def raptor_head_recipe(**overrides) -> TrainConfig:
    """``raptor-head``: RAPTOR under the reference's protocol with the head trained inside its one
    shared clip (as dp-lora trains its head), shared ratio 0.9: most of the budget on the shared
    stream, which then holds the head."""
    return replace_fields(reference_recipe("raptor"), {"freeze_head": False, "privacy.shared_ratio": 0.9,
                                                       **overrides})


def dpsgd_head_recipe(**overrides) -> TrainConfig:
    """``dpsgd-head``: :func:`raptor_head_recipe`'s one-clip control, the same trainable set (the
    protocol's and the head) under dpsgd's one clip and one sigma."""
    return replace_fields(reference_recipe("dpsgd"), {"freeze_head": False, **overrides})


#: named variants: a library method at fixed settings (the config's ``method``), with its own row in
#: the experiments' tables; each a function of the field overrides returning a TrainConfig
VARIANT_RECIPES = {"raptor-split": raptor_split_recipe, "raptor-head": raptor_head_recipe,
                   "dpsgd-head": dpsgd_head_recipe}


def grid_recipe(method: str = "raptor", **overrides) -> TrainConfig:
    """The base of an experiment grid's cell (experiments/run_grid.py), whose settings replace its
    fields (``overrides``: dotted paths allowed, ``"optim.lr"``): seeded and NOT secure (an
    experiment, not a release), no evaluation during the run, full weights with the head trained,
    the public layer rule, AdamW, C_s = C_e = 1, RAPTOR's shared ratio 0.3 (the reference's) with
    the uniform clip rule, dev batches of 256. The weight decay is the optimizer's
    (:func:`~raptor.training.config.default_weight_decay`) unless an override sets it."""
    cfg = TrainConfig(method=method, seed=0, eval_every=0, layers="auto", lora=False, freeze_head=False,
                      privacy=PrivacyConfig(epsilon=8.0 if is_private(method) else None, clip_shared=1.0,
                                            clip_expert=1.0, clip_rule="uniform", shared_ratio=0.3,
                                            shared_split="none", secure_rng=False),
                      performance=PerformanceConfig(eval_batch_size=256),
                      optim=OptimConfig(name="adamw", lr_expert=None))
    cfg = replace_fields(cfg, overrides) if overrides else cfg
    if cfg.optim.weight_decay is None:
        cfg = replace(cfg, optim=replace(cfg.optim, weight_decay=default_weight_decay(cfg.optim.name)))
    return cfg


@dataclass(frozen=True)
class DemoRecipe:
    """``raptor demo``'s settings for one model: the config of each run, and how the demo declares
    its public data and sets the head (flags of ``raptor demo``, not fields of the config)."""

    config: TrainConfig
    public: str          # "model": the model's own public_corpus.txt | "sample": a slice of the bundled sample
    public_size: int     # records of the sample's public split (public "sample")
    head_init: str       # "label-words" | "public-fit" (fitted on the declared-public records)
    evaluations: int     # dev evaluations per run, evenly spaced


def _demo_config(method: str, *, optimizer: str, lr: float, lr_expert: float, clip_expert: float, lora: bool,
                 freeze_head: bool, layers: str) -> TrainConfig:
    """What both demo recipes share: epsilon 1, one epoch, B 256, 40 tokens, shared ratio 0.9, C_s 1,
    micro-batch 64, dev batches of 256; the expert stream's own lr for raptor only."""
    return TrainConfig(method=method, epochs=1.0, batch_size=256, max_length=40, lora=lora, freeze_head=freeze_head,
                       layers=layers, output_dir=f"runs/demo/{method}",
                       privacy=PrivacyConfig(epsilon=1.0 if is_private(method) else None, clip_shared=1.0,
                                             clip_expert=clip_expert, shared_ratio=0.9),
                       performance=PerformanceConfig(micro_batch_size=64, eval_batch_size=256),
                       optim=OptimConfig(name=optimizer, lr=lr, lr_expert=lr_expert if method == "raptor" else None,
                                         momentum=0.0))


def switch_demo_recipe(method: str = "raptor") -> DemoRecipe:
    """``switch-public-tiny`` (the shipped warm start), chosen on this machine at epsilon 1 (README
    "Demo"): plain SGD beat AdamW under DP here (dpsgd after one epoch: AdamW lr 3e-3 0.519; SGD lr
    0.5 / 2 / 4: 0.550 / 0.628 / 0.622; majority class 0.509), one epoch keeps both runs within the
    time budget, and 40 tokens cover 90% of the sample's records. RAPTOR's shared ratio 0.9 gives its
    shared stream about DP-SGD's noise; its expert stream steps at lr / 8 (the public denominator
    n_hat_e = B pi_e, pi_e about 1/8, makes an expert's step about 8x what a division by B gives; 3
    seeds, 8,000 records, epsilon 1: 0.637 +- 0.005 against 0.601 +- 0.021 with lr_expert = lr). The
    public data is the model's own corpus; the head starts from the label words."""
    return DemoRecipe(_demo_config(method, optimizer="sgd", lr=2.0, lr_expert=0.25, clip_expert=1.0, lora=False,
                                   freeze_head=False, layers="auto"),
                      public="model", public_size=400, head_init="label-words", evaluations=6)


def minilm_demo_recipe(method: str = "raptor") -> DemoRecipe:
    """``minilm-moe`` (the real pretrained all-MiniLM-L6-v2, upcycled): the paper protocol of
    docs/RESULTS.md's minilm-moe table (LoRA r 8 on attention and on the last MoE layer's experts, the
    head frozen after a fit on the sample's declared-public split of 500 records), AdamW lr 5e-3 (the
    table's selection at epsilon 1 and 8), C at about the public median norms (shared 1.0, owner
    expert 0.2; docs/RESULTS.md), shared ratio 0.9."""
    return DemoRecipe(_demo_config(method, optimizer="adamw", lr=5e-3, lr_expert=5e-3, clip_expert=0.2, lora=True,
                                   freeze_head=True, layers="last"),
                      public="sample", public_size=500, head_init="public-fit", evaluations=3)


#: ``raptor demo --model NAME`` -> its recipe; any other model takes the shipped warm start's
DEMO_RECIPES = {"switch-public-tiny": switch_demo_recipe, "minilm-moe": minilm_demo_recipe}


def demo_recipe(model: str, method: str = "raptor") -> DemoRecipe:
    """The demo's recipe of ``model`` (:data:`DEMO_RECIPES`; the shipped warm start's for any other)."""
    return DEMO_RECIPES.get(model, switch_demo_recipe)(method)
