"""The paper's grid: every method x epsilon x seed on a GLUE task, from a warm start or
random init, with a matched tuning budget; resumable, in process through the library.

    python experiments/run_grid.py --grid sst2_switch --model-dir /work/runs/switch-warm \\
        --models warm random --tasks sst2 --threads 1            # run (or continue) the grid
    python experiments/run_grid.py ... --plan                     # cell count and an ETA guess
    python experiments/run_grid.py ... --summarize                # JSON, markdown, PNGs from the JSONL

Axes: model (``warm`` = the ``save_pretrained`` directory ``--model-dir``; ``random`` = the same
architecture and tokenizer with random weights drawn from the cell's seed), task, method, target
epsilon (one fixed delta for every cell, ``--delta``), seed.

Data (the GLUE public convention of ``raptor train``): from the task's TRAINING split, two
deterministic slices are declared public (``--public-size`` records: the public corpus the
methods use for routing statistics, layer choice and clip rules; ``--selection-size`` records:
the selection split used to tune), and the private set is a seeded subsample of the rest
(``--max-train``). The GLUE dev split is the reported metric and is read only by the final cells.

Matched tuning: every DP method gets the same number of configurations (RAPTOR's own knobs, the
shared ratio and the clip rule, count inside its budget); each is run once (``--tune-seeds``) and
scored on the selection split (stage ``tune``); the best one per (model, task, method, epsilon)
is rerun with ``--seeds`` and scored on dev (stage ``final``). Every finished cell is one line of
``experiments/results/<grid>.jsonl`` (raptor.analysis.grid); a rerun skips finished cells.
Several processes may work on one grid (``--shard K/N``, or one started by hand for one group):
each claims the cell it runs (raptor.analysis.claims), skips a cell another one is running,
and selects a group's configuration only once all of its tuning cells have finished.
Cells are seeded (reproducible, NOT secure randomness): this is an experiment, not a release.

Configs: a cell's hparams are fields of the grid's recipe (``raptor.recipes.grid_recipe``,
``HPARAM_FIELDS``), and its TrainConfig is that recipe with them (``build_config``). A search space
(``--space``) is a function of the method over recipes: ``paper`` and ``minilm`` carry the
reference's protocol (``reference_recipe``), ``demo`` the demo's (``switch_demo_recipe``),
``reference`` the reference grid's (``reference_grid_recipe``); a variant (``raptor-split``, ...) is
a library method at the settings of its recipe (``raptor.recipes.VARIANT_RECIPES``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache, partial
from pathlib import Path

import torch

from raptor._hashing import sha256_file
from raptor.analysis.grid import Cell, git_revision, read_records, run_grid
from raptor.errors import ConfigError
from raptor.recipes import (
    REFERENCE_GRID,
    VARIANT_RECIPES,
    grid_recipe,
    reference_grid_recipe,
    reference_recipe,
    switch_demo_recipe,
)
from raptor.training.config import METHODS

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"  # --results-dir replaces it
DP_METHODS = tuple(m for m in METHODS if m != "nonprivate")
#: ``--space reference``: the reference's methods by their names, each at its own grid settings
#: (raptor.recipes.REFERENCE_GRID); the grid's ``raptor`` is the reference's "ours" and its
#: ``nonprivate`` the reference's "upper_bound"
REFERENCE_NAMES = {"raptor": "ours", "nonprivate": "upper_bound"}
REFERENCE_METHODS = tuple(m for m in REFERENCE_GRID if m not in REFERENCE_NAMES.values())
#: grid methods that are a library method at fixed settings: each a recipe (its config's ``method``
#: is the library method it runs), with its own row in every table
VARIANTS = {**VARIANT_RECIPES, **{m: partial(reference_grid_recipe, m) for m in REFERENCE_METHODS}}
GRID_METHODS = (*METHODS, *VARIANTS)
#: the search spaces that give each variant its settings: a variant runs only under these
VARIANT_SPACES = {"raptor-split": ("paper",), "raptor-head": ("paper", "minilm"), "dpsgd-head": ("paper", "minilm"),
                  **{m: ("reference",) for m in REFERENCE_METHODS}}
#: plot colours of the variants (the library methods' are raptor.analysis.paper_table.METHOD_COLOURS)
VARIANT_COLOURS = dict(zip(VARIANTS, ("tab:pink", "tab:olive", "black", "gold", "navy", "magenta", "lime", "teal",
                                      "salmon")))


def library_method(method: str) -> str:
    """The library method a grid method runs: a variant's, its recipe's (``raptor-split``: raptor)."""
    return VARIANTS[method]().method if method in VARIANTS else method


# ------------------------------------------------------------------------------------------------
# A cell's settings: hparams, each a field of the grid's recipe (raptor.recipes.grid_recipe).
# ------------------------------------------------------------------------------------------------

#: a cell's hparam -> the TrainConfig field it sets. The other hparams: the data (``n_pub``, ``n_sel``,
#: ``n_train``), the head's initialisation (``head``) and the clip (``clip``: one C for both streams, a
#: number or a quantile of the public norms calibrated per cell, see ``clip_value``)
HPARAM_FIELDS = {"B": "batch_size", "epochs": "epochs", "max_len": "max_length", "lora": "lora",
                 "freeze_head": "freeze_head", "layers": "layers", "opt": "optim.name", "lr": "optim.lr",
                 "lr_expert": "optim.lr_expert", "clip_rule": "privacy.clip_rule",
                 "shared_ratio": "privacy.shared_ratio", "shared_split": "privacy.shared_split"}


def hparams_of(config, names: Sequence[str]) -> dict:
    """The hparams ``names`` as ``config`` (a recipe's TrainConfig) sets them: what a cell carries of
    a recipe. ``clip``: its one C (C_s = C_e); ``layers``: a rule or comma-separated indices."""
    out = {}
    for name in names:
        if name == "clip":
            privacy = config.privacy
            if privacy.clip_shared != privacy.clip_expert:
                raise ConfigError(f"a cell's clip is one C for both streams; the recipe's C_s {privacy.clip_shared} "
                                  f"and C_e {privacy.clip_expert} differ")
            out[name] = privacy.clip_shared
            continue
        value = config
        for part in HPARAM_FIELDS[name].split("."):
            value = getattr(value, part)
        out[name] = ",".join(str(v) for v in value) if isinstance(value, tuple) else value
    return out


# ------------------------------------------------------------------------------------------------
# The search spaces: each a function of the grid method, returning its configurations (hparams), the
# same number for every DP method (matched budget). A space over a recipe carries the recipe's
# settings into each of its configurations (hparams_of).
# ------------------------------------------------------------------------------------------------

#: learning rates every DP method searches over (AdamW)
LRS = (5e-4, 2e-3)
#: baselines: lr x clip norm C (a quantile of the public norms, see ``clip_value``); lr varies fastest,
#: so that the first ``--configs`` configurations of every method are its learning rates at its defaults
BASELINE_SPACE = tuple({"lr": lr, "clip": c} for c in ("pub-median", "pub-q90") for lr in LRS)
#: RAPTOR: lr x its own knobs (shared ratio r) with the per-expert median-ratio clip rule on the
#: public calibration; they count inside the same budget
RAPTOR_SPACE = tuple({"lr": lr, "clip": "pub-median", "shared_ratio": r, "clip_rule": "median-ratio"}
                     for r in (0.3, 0.7) for lr in LRS)
NONPRIVATE_SPACE = tuple({"lr": lr} for lr in (1e-3, 3e-3, 3e-4, 1e-2))
#: configurations per method actually searched (``--configs``): the first K of each space
CONFIGS = 2
#: ``--space expert-lr``: RAPTOR's expert stream at lr / 8 in each of its configurations (both shipped
#: warm starts have E = 8 experts, so pi_e is about 1/8 and n_hat_e about B / 8: lr / 8 undoes the
#: public denominator's scale-up of an expert's step on average)
EXPERT_LR_RAPTOR_SPACE = tuple({**c, "lr_expert": c["lr"] / 8} for c in RAPTOR_SPACE)
#: ``--space shared-ratio-0.9``: RAPTOR's shared ratio r = 0.9 instead of 0.3 in each of its
#: configurations (the shared stream then gets 90% of the inverse noise variance, sigma_s =
#: sigma_eff / sqrt(0.9), near DP-SGD's sigma, instead of sigma_eff / sqrt(0.3))
SHARED_RATIO_RAPTOR_SPACE = tuple({**c, "shared_ratio": 0.9} for c in RAPTOR_SPACE if c["shared_ratio"] == 0.3)
#: ``--space first-layer``: ``shared-ratio-0.9`` with RAPTOR protecting MoE layer 0 instead of the
#: public-entropy pick. A classifier that pools the LAST token of a causal model (OLMoE) reads the
#: last MoE layer's expert output at that one token only, so a record's owner expert there (chosen
#: over all its tokens) gets a gradient only when the last token routes to it; an early layer's
#: experts reach the pooled token at every position through attention.
FIRST_LAYER_RAPTOR_SPACE = tuple({**c, "layers": "0"} for c in SHARED_RATIO_RAPTOR_SPACE)


def default_space(method: str, raptor: tuple[dict, ...] = RAPTOR_SPACE) -> tuple[dict, ...]:
    """``--space default``, over the grid's recipe alone; ``expert-lr``, ``shared-ratio-0.9`` and
    ``first-layer`` are the same with RAPTOR's own space ``raptor`` (the same budget; the other
    methods' cells are the default space's)."""
    if method == "nonprivate":
        return NONPRIVATE_SPACE
    return raptor if method == "raptor" else BASELINE_SPACE


#: ``--space demo``'s non-private ceiling (not a DP method): AdamW lr 1e-3 for 3 epochs
DEMO_NONPRIVATE_SPACE = ({"lr": 1e-3, "epochs": 3.0},)


def demo_space(method: str, expert_lr: bool = False) -> tuple[dict, ...]:
    """``--space demo``: ONE fixed configuration per method, the recipe of ``raptor demo`` on the
    shipped warm start (:func:`raptor.recipes.switch_demo_recipe`: plain SGD, lr 2, C = 1; RAPTOR's
    shared ratio 0.9), with RAPTOR's expert stream at the shared lr. One configuration is a matched
    budget of one: no tuning stage runs, the final seeds run it directly. ``demo-expert-lr``
    (``expert_lr``): RAPTOR's expert stream at the recipe's own lr, 2 / 8 (the public denominator
    n_hat_e = B pi_e, pi_e about 1/8 here, makes an expert's step about 8x the step a division by B
    gives; a RAPTOR knob, inside its budget of one)."""
    if method == "nonprivate":
        return DEMO_NONPRIVATE_SPACE
    names = ("opt", "lr", "clip")
    if method == "raptor":
        names += ("shared_ratio", "lr_expert") if expert_lr else ("shared_ratio",)
    return (hparams_of(switch_demo_recipe(method).config, names),)


#: the reference protocol's settings a cell carries (its B, epochs, max length and lr are the grid's)
PROTOCOL_HPARAMS = ("lora", "freeze_head", "layers")
PAPER_PROTOCOL = hparams_of(reference_recipe("raptor"), PROTOCOL_HPARAMS)
#: ``--configs 3`` adds a third learning rate to every method (8e-3 for the DP methods, which all
#: selected the top of the first two; 3e-4 for the non-private ceiling, which selected the bottom):
#: the first two configurations, and so every cell of the two-lr table, are unchanged
PAPER_LRS = (*LRS, 8e-3)
MINILM_LRS = (5e-3, 2e-3)
#: the methods that keep their own definitions under the protocol (their head trained, as it made
#: last-layer the best baseline so far)
OWN_DEFINITION = ("dp-lora", "last-layer")


def protocol_space(method: str, *, lrs: Sequence[float], nonprivate_lrs: Sequence[float],
                   raptor_ratio: float | None = None) -> tuple[dict, ...]:
    """The reference's protocol (:func:`raptor.recipes.reference_recipe`), one configuration per
    learning rate of ``lrs``: the roles-built methods (dpsgd, dpsgd-full, shared-only, expert-only,
    raptor and the non-private ceiling) train LoRA r 8 on attention and on the experts of the LAST MoE
    layer with the head FROZEN; dp-lora and last-layer keep their own definitions; a variant is its
    recipe (``raptor-split``: :func:`raptor.recipes.raptor_split_recipe`, the head trained in its own
    clipping group of the shared stream). Every DP method: C from the public median norm of its own
    groups; RAPTOR and its variants at their recipe's shared ratio (``raptor_ratio``: RAPTOR's own)
    with the per-expert median-ratio clip rule.

    ``--space paper``: lrs 5e-4, 2e-3 (8e-3 with ``--configs 3``). ``--space minilm``: the protocol on
    the upcycled all-MiniLM-L6-v2 (``minilm-moe``) at lrs 5e-3, 2e-3 and RAPTOR's shared ratio 0.5.
    The head comes from ``--head-init`` (``public-fit``: fitted on the public slice, then frozen
    for the roles-built methods; dp-lora and last-layer train theirs from that start)."""
    if method in OWN_DEFINITION:
        return tuple({"lr": lr, "clip": "pub-median"} for lr in lrs)
    recipe = VARIANTS[method]() if method in VARIANTS else reference_recipe(method)
    split = ("shared_split",) if recipe.privacy.shared_split != "none" else ()
    protocol = hparams_of(recipe, PROTOCOL_HPARAMS + split)
    if method == "nonprivate":
        return tuple({**protocol, "lr": lr} for lr in nonprivate_lrs)
    if recipe.method != "raptor":
        return tuple({**protocol, "lr": lr, "clip": "pub-median"} for lr in lrs)
    ratio = raptor_ratio if method == "raptor" and raptor_ratio is not None else recipe.privacy.shared_ratio
    return tuple({**protocol, "lr": lr, "clip": "pub-median", "shared_ratio": ratio, "clip_rule": "median-ratio"}
                 for lr in lrs)


#: the reference grid's settings a ``--space reference`` cell carries
REFERENCE_HPARAMS = ("B", "lr", "epochs", "lora", "freeze_head", "layers", "clip", "shared_ratio")


def reference_space(method: str) -> tuple[dict, ...]:
    """``--space reference``: ONE fixed configuration per method, the reference grid's own batch
    size, learning rate, epochs and trainable set for it (:func:`raptor.recipes.reference_grid_recipe`;
    no tuning: the paper's settings, not a matched budget), C_s = C_e = 1 and RAPTOR's shared ratio
    0.3 as in the reference. The head comes from ``--head-init``; the reference's own methods train
    theirs or keep it frozen as the grid says."""
    name = REFERENCE_NAMES.get(method, method)
    if name not in REFERENCE_GRID:
        raise ConfigError(f"--methods {method}: --space reference runs {', '.join(REFERENCE_NAMES)} and the "
                          f"reference's methods ({', '.join(REFERENCE_METHODS)})")
    return (hparams_of(reference_grid_recipe(name), REFERENCE_HPARAMS),)


#: ``--space NAME`` -> its search space, a function of the grid method
SPACE_FUNCTIONS = {
    "default": default_space,
    "expert-lr": partial(default_space, raptor=EXPERT_LR_RAPTOR_SPACE),
    "shared-ratio-0.9": partial(default_space, raptor=SHARED_RATIO_RAPTOR_SPACE),
    "first-layer": partial(default_space, raptor=FIRST_LAYER_RAPTOR_SPACE),
    "demo": demo_space,
    "demo-expert-lr": partial(demo_space, expert_lr=True),
    "paper": partial(protocol_space, lrs=PAPER_LRS, nonprivate_lrs=(1e-3, 3e-3, 3e-4)),
    "minilm": partial(protocol_space, lrs=MINILM_LRS, nonprivate_lrs=(1e-3,), raptor_ratio=0.5),
    "reference": reference_space,
}
#: the search space in use (``--space``)
SPACE = "default"
SPACES = tuple(SPACE_FUNCTIONS)


def search_space(method: str) -> tuple[dict, ...]:
    """The configurations ``method`` searches under ``--space`` (:data:`SPACE`): the first
    ``--configs`` (:data:`CONFIGS`) of its space. A variant runs only under the spaces that give it
    its settings (:data:`VARIANT_SPACES`)."""
    if method in VARIANTS and SPACE not in VARIANT_SPACES.get(method, ()):
        where = " or ".join(f"--space {s}" for s in VARIANT_SPACES.get(method, ())) or "no --space"
        raise ConfigError(f"--methods {method}: a method at settings of its own, which runs only under {where}")
    return SPACE_FUNCTIONS[SPACE](method)[:CONFIGS]


def in_space(record: Mapping, fx: Fixed) -> bool:
    """Whether a record may take part in the active space's selection: every final cell, and the
    tuning cells of the active space only (one grid file may hold the tuning cells of several
    spaces; selecting among all of them would give a method more than its matched budget)."""
    cell = record["cell"]
    if cell.get("stage") != "tune":
        return True
    return any(dict(cell["hparams"]) == {**fx.hparams(), **h} for h in search_space(cell["method"]))


def tuned(method: str) -> bool:
    """A method with one configuration has nothing to select: its group runs no tuning cell."""
    return len(search_space(method)) > 1


def fixed_choice(group, fx: Fixed) -> dict | None:
    """The hyperparameters of an untuned group (its one configuration), else None."""
    method = group[2]
    return None if tuned(method) else {**fx.hparams(), **search_space(method)[0]}


def check_matched_budget(methods: Sequence[str]) -> int:
    """The configurations per DP method of ``methods`` (the same for each: a matched budget)."""
    sizes = {m: len(search_space(m)) for m in methods if m != "nonprivate"}
    if len(set(sizes.values())) > 1:
        raise ConfigError(f"unmatched tuning budget: configurations per DP method {sizes}")
    return next(iter(sizes.values()), 0)


# ------------------------------------------------------------------------------------------------
# Data: public slice, selection slice, private subsample, dev: all from the library's loaders.
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskData:
    public: object        # ClassificationData, declared public (slice of the training split)
    selection: object     # ClassificationData, declared public (a second slice): the tuning split
    private: object       # ClassificationData, private (a seeded subsample of the rest)
    dev: object           # ClassificationData: the reported split
    metrics: tuple[str, ...]
    task_type: str
    rule: str


@lru_cache(maxsize=8)
def task_data(task: str, data_dir: str, public_size: int, selection_size: int, max_train: int | None) -> TaskData:
    import numpy as np

    from raptor.data.loaders import DataSource, load_splits, split_public_private

    splits, desc = load_splits(DataSource(task=task, data_dir=data_dir))
    train = splits.train
    carved = split_public_private(train, public_size=public_size + selection_size, seed=0)
    pub_all = carved.public
    public = pub_all.subset(range(public_size), source=f"{task} public corpus")
    selection = pub_all.subset(range(public_size, len(pub_all)), source=f"{task} selection split")
    private = carved.private
    if max_train is not None and max_train < len(private):
        idx = np.random.Generator(np.random.PCG64(1)).permutation(len(private))[:max_train]
        private = private.subset(sorted(int(i) for i in idx), source=f"{task} private subsample")
    rule = (f"{desc}: {carved.rule}; of those, the first {public_size} (in index order) are the public corpus "
            f"and the other {selection_size} the selection split (both declared public); private = "
            + (f"{len(private)} of the rest, PCG64(1) permutation" if max_train else "the rest"))
    return TaskData(public, selection, private, splits.validation, splits.metric_names, train.task_type, rule)


# ------------------------------------------------------------------------------------------------
# Models: the warm directory, or the same architecture with random weights.
# ------------------------------------------------------------------------------------------------


def model_label(kind: str, model_dir: str) -> str:
    """``<dir name>@<sha of its weights>`` (warm) or ``random(<same>)``: a stable key part."""
    path = Path(model_dir)
    weights = path / "model.safetensors"
    digest = sha256_file(weights)[:8] if weights.exists() else "noweights"
    base = f"{path.name}@{digest}"
    if kind == "warm":
        return base
    if kind == "random":
        return f"random({base})"
    raise ConfigError(f"--models takes 'warm' and/or 'random', got {kind!r}")


@lru_cache(maxsize=2)
def tokenizer_of(model_dir: str):
    from raptor.data import load_tokenizer

    return load_tokenizer(model_dir)


def make_model(model: str, model_dir: str, num_labels: int, seed: int, head: str, task: str, public=None):
    """The cell's model: warm weights or a random init (generator seeded by ``seed``), and its head
    (``public-fit``: fitted on the declared-public records ``public``, :func:`fit_head_on_public`)."""
    from raptor.moe.models import build_model, load_model
    from raptor.training.setup.head_init import (
        LABEL_WORDS,
        classification_head,
        fit_head_on_public,
        init_head_from_label_words,
    )

    if model.startswith("random("):
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(model_dir)
        config.num_labels = num_labels
        if num_labels == 1:
            config.problem_type = "regression"
        config.dtype = "float32"
        net = build_model(config, generator=torch.Generator().manual_seed(10_000 + seed)).float()
    else:
        net = load_model(model_dir, num_labels=num_labels)
    tokenizer = tokenizer_of(model_dir)
    if head == "label-words":
        init_head_from_label_words(net, tokenizer, LABEL_WORDS[task])
    elif head == "random":  # the head from an explicit generator (HF would draw it from the global RNG)
        lin = classification_head(net)
        with torch.no_grad():
            lin.weight.copy_(torch.randn(lin.weight.shape, generator=torch.Generator().manual_seed(20_000 + seed)) * 0.02)
            if lin.bias is not None:
                lin.bias.zero_()
    elif head == "public-fit":
        if public is None:
            raise ConfigError("head init 'public-fit' needs the public records")
        fit_head_on_public(net, public)
    else:
        raise ConfigError(f"head init must be 'random', 'label-words' or 'public-fit', got {head!r}")
    return net, tokenizer


@lru_cache(maxsize=4)
def records_of(model_dir: str, task: str, data_dir: str, public_size: int, selection_size: int,
               max_train: int | None, max_length: int) -> dict:
    from raptor.data.loaders import to_records

    d = task_data(task, data_dir, public_size, selection_size, max_train)
    tok = tokenizer_of(model_dir)
    return {name: to_records(tok, getattr(d, name), max_length)
            for name in ("public", "selection", "private", "dev")}


# ------------------------------------------------------------------------------------------------
# Public clip calibration: C from public per-record norms of the method's own gradient groups.
# ------------------------------------------------------------------------------------------------


def public_norms(trainer, public: Mapping[str, torch.Tensor], micro: int, device: str = "cpu") -> dict:
    """{group key: unclipped per-record norms on the public records} from a built trainer's engine.

    Privacy: public records only (the engine is the one the private run will use; its weights are
    the initial ones, public)."""
    from raptor.training.setup.public_stage import batches

    engine = trainer.engine
    keys = list(engine.group_map.keys)
    out: dict = {k: [] for k in keys}
    for batch in batches(public, micro, device):
        res = engine.compute(batch, {k: math.inf for k in keys})
        for k in keys:
            n = res.norms[k].detach().double()
            if k.is_expert:
                n = n[res.owners[k.layer] == k.expert_id]
            out[k].append(n)
    return {k: torch.cat(v) if v else torch.zeros(0, dtype=torch.float64) for k, v in out.items()}


_NORMS: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}


def calibration_key(cell: Cell) -> tuple:
    """What a cell's public calibration norms depend on. The seed is part of it wherever the initial
    weights depend on it: a random init, a random head, and LoRA (its A factors are drawn from the
    cell's generator). Without LoRA here, a LoRA cell once took the norms of whichever cell of its
    group had run first in the process: C then depended on the process's history, not on the cell."""
    p = cell.params
    seeded = (cell.model.startswith("random(") or p["head"] == "random" or bool(p.get("lora", False))
              or cell.method == "dp-lora")
    return (cell.model, cell.task, cell.method, p["head"], p["n_pub"], p["max_len"], p["B"], p.get("layers", "auto"),
            p.get("lora", False), p.get("freeze_head", False), p.get("shared_split", "none"),
            cell.seed if seeded else None)


def calibration_norms(cell: Cell, fx: Fixed, build) -> tuple[torch.Tensor, torch.Tensor]:
    """(shared or dense norms, owner-expert norms) of the public records at the cell's initial
    weights, for its method: computed once per (model, task, method, head, data settings, protected
    layers, and the seed where the initial weights depend on it)."""
    p = cell.params
    key = calibration_key(cell)
    if key not in _NORMS:
        probe = build(1.0, 1.0)
        norms = public_norms(probe, records_of(fx.model_dir, cell.task, fx.data_dir, p["n_pub"], p["n_sel"],
                                               p["n_train"] or None, p["max_len"])["public"], fx.micro_batch_size,
                             fx.device)
        # the shared (or dense) stream's per-record norm: over all its groups (head and backbone when split)
        shared = torch.stack([v for k, v in norms.items() if not k.is_expert]).pow(2).sum(0).sqrt()
        experts = [v for k, v in norms.items() if k.is_expert]
        _NORMS[key] = (shared, torch.cat(experts) if experts else torch.zeros(0, dtype=torch.float64))
    return _NORMS[key]


def clip_value(spec, norms: torch.Tensor) -> float:
    """A number, or ``pub-median`` / ``pub-q90``: that quantile of the public norms."""
    if isinstance(spec, (int, float)):
        return float(spec)
    q = {"pub-median": 0.5, "pub-q90": 0.9}.get(spec)
    if q is None:
        raise ConfigError(f"clip must be a number, 'pub-median' or 'pub-q90', got {spec!r}")
    n = norms[torch.isfinite(norms) & (norms > 0)]
    if n.numel() == 0:
        raise ConfigError("no finite positive public gradient norm to calibrate the clip on")
    return float(torch.quantile(n, q))


# ------------------------------------------------------------------------------------------------
# One cell.
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fixed:
    """Settings shared by every cell of a grid (they go into each cell's hparams, hence its key)."""

    model_dir: str
    data_dir: str
    public_size: int = 500
    selection_size: int = 500
    max_train: int | None = 2000
    max_length: int = 40
    batch_size: int = 128
    epochs: float = 2.0
    delta: float = 1e-5
    head: str = "label-words"
    micro_batch_size: int = 64
    device: str = "cpu"  # not in the cells' hparams: where a cell runs does not change what it is

    def hparams(self) -> dict:
        return {"n_pub": self.public_size, "n_sel": self.selection_size, "n_train": self.max_train or 0,
                "max_len": self.max_length, "B": self.batch_size, "epochs": self.epochs, "head": self.head}


def build_config(cell: Cell, fx: Fixed, clip_shared: float, clip_expert: float):
    """The TrainConfig of ``cell``: the grid's recipe (:func:`raptor.recipes.grid_recipe`) of its library
    method with the fields its hparams set (:data:`HPARAM_FIELDS`), its epsilon and seed, the grid's
    delta, micro-batch and device, and the clips (a number, or calibrated on public norms by the caller)."""
    fields = {HPARAM_FIELDS[k]: _layers(v) if k == "layers" else v for k, v in cell.hparams if k in HPARAM_FIELDS}
    return grid_recipe(library_method(cell.method), **{
        **fields, "seed": cell.seed, "output_dir": str(HERE.parent / "runs" / "grid_tmp"),
        "privacy.epsilon": None if cell.method == "nonprivate" else cell.epsilon, "privacy.delta": fx.delta,
        "privacy.clip_shared": clip_shared, "privacy.clip_expert": clip_expert,
        "performance.micro_batch_size": fx.micro_batch_size, "performance.device": fx.device})


def _layers(spec: str) -> str | tuple[int, ...]:
    """A cell's ``layers`` hparam: ``"auto"`` or comma-separated MoE layer indices (a string, so that
    the cell stays hashable)."""
    return spec if spec in ("auto", "last", "all") else tuple(int(v) for v in str(spec).split(","))


def train_cell(cell: Cell, fx: Fixed, *, eval_split: str | None = None) -> tuple[dict, object]:
    """Train one cell through the library; return (the result record, the trainer)."""
    from raptor.training.evaluator import Evaluator
    from raptor.training.run.assemble import assemble_run

    p = cell.params
    d = task_data(cell.task, fx.data_dir, p["n_pub"], p["n_sel"], p["n_train"] or None)
    recs = records_of(fx.model_dir, cell.task, fx.data_dir, p["n_pub"], p["n_sel"], p["n_train"] or None,
                      p["max_len"])
    split = eval_split or ("selection" if cell.stage == "tune" else "dev")
    evaluator = Evaluator({split: recs[split]}, task_type=d.task_type, metrics=d.metrics, batch_size=256)
    num_labels = 1 if d.task_type == "regression" else len(d.private.label_names)

    def build(clip_s: float, clip_e: float):
        net, _ = make_model(cell.model, fx.model_dir, num_labels, cell.seed, p["head"], cell.task, recs["public"])
        return assemble_run(build_config(cell, fx, clip_s, clip_e), net, train=recs["private"],
                             validation=recs[split], public=recs["public"], evaluator=evaluator)

    clips = {}
    spec = p.get("clip", 1.0)
    if cell.method == "nonprivate":
        trainer = build(1.0, 1.0)  # no clipping on the plain path
    elif isinstance(spec, (int, float)):
        trainer = build(float(spec), float(spec))
    else:  # C from public norms of the method's own groups at the initial weights (cached), then build
        shared, experts = calibration_norms(cell, fx, build)
        # a stream with no trainable parameter (expert-only's shared group, shared-only's experts)
        # has no norm to calibrate on; its clip is then unused, and takes the other stream's
        c_s, c_e = (clip_value(spec, n) if bool((n > 0).any()) else None for n in (shared, experts))
        if c_s is None and c_e is None:
            raise ConfigError(f"{cell.label()}: no positive public gradient norm in any group to calibrate the clip on")
        clips = {"clip_shared": c_s if c_s is not None else c_e, "clip_expert": c_e if c_e is not None else c_s}
        trainer = build(clips["clip_shared"], clips["clip_expert"])
    start = time.perf_counter()
    res = trainer.fit(progress=False)
    main = res["main_metric"]
    metric = float(res["final_metrics"][main])
    out = {"metric_name": main, "epsilon": res["epsilon"], "delta": res["delta"], "steps": res["steps"],
           "sigma": res["sigma"], "sample_rate": res["sample_rate"], "trained_layers": res.get("trained_layers"),
           "final_metrics": res["final_metrics"], "eval_split": split, "fit_seconds": time.perf_counter() - start,
           "seconds_per_step": res["seconds_per_step"], "calibrated_clips": clips,
           "nonfinite_records_diagnostic_not_dp": res["nonfinite_records_diagnostic_not_dp"],
           "single_class_prediction": res.get("single_class_prediction"),  # the evaluated split, one class
           "private_records": len(d.private), "public_records": len(d.public), "selection_records": len(d.selection),
           "dev_records": len(d.dev), "data_rule": d.rule, "device": torch.device(fx.device).type}
    out["selection_metric" if split == "selection" else "metric"] = metric
    return out, trainer


# ------------------------------------------------------------------------------------------------
# The grid: cells, stages, shards, plan, summaries.
# ------------------------------------------------------------------------------------------------


def run_final_cells(cells: Sequence[Cell], fx: Fixed, results: str | Path, *, desc: str,
                    shown: Mapping | None = None) -> list[dict]:
    """Diagnostic final cells at fixed settings (the ablation scripts): each trained by
    :func:`train_cell` into ``results`` (resumable: finished cells are skipped; two processes on one
    file each claim the cells they run), then one JSON line per cell printed (``shown``: extra
    entries of each line, e.g. the overrides)."""
    def runner(cell):
        return train_cell(cell, fx)[0]

    claims = Path(results).parent / ".claims" / Path(results).stem
    records = run_grid(cells, results, runner, on_error="raise", revision=git_revision(HERE), desc=desc,
                       claims=claims)
    for r in records:
        c, res = r["cell"], r["result"]
        print(json.dumps({"method": c["method"], "epsilon": c["epsilon"], "seed": c["seed"], "dev": res["metric"],
                          **(shown or {}), "sigma": res["sigma"], "clips": res["calibrated_clips"]}))
    return records


def groups(args, fx: Fixed) -> list[tuple[str, str, str, float | None]]:
    """(model, task, method, epsilon) in run order: per task the non-private groups, then per
    epsilon every model and method (so that a stopped grid holds whole comparisons)."""
    models = [model_label(k, fx.model_dir) for k in args.models]
    out: list[tuple[str, str, str, float | None]] = []
    for task in args.tasks:
        if "nonprivate" in args.methods:
            out += [(model, task, "nonprivate", None) for model in models]
        out += [(model, task, method, eps) for eps in args.epsilons for model in models
                for method in args.methods if method != "nonprivate"]
    return out


def tune_cells(group, fx: Fixed, tune_seeds: Sequence[int]) -> list[Cell]:
    model, task, method, eps = group
    if not tuned(method):
        return []
    return [Cell(model=model, task=task, method=method, epsilon=eps, seed=s, stage="tune",
                 hparams={**fx.hparams(), **h}) for h in search_space(method) for s in tune_seeds]


def tuning_done(group, fx: Fixed, tune_seeds: Sequence[int], finished: set[str]) -> bool:
    """Whether every tuning cell of ``group`` is among the ``finished`` keys (an untuned group has
    none): a selection must see the whole search space, or it would be a smaller budget."""
    return all(c.key in finished for c in tune_cells(group, fx, tune_seeds))


def final_cells(group, fx: Fixed, best: Mapping, seeds: Sequence[int]) -> list[Cell]:
    model, task, method, eps = group
    return [Cell(model=model, task=task, method=method, epsilon=eps, seed=s, stage="final", hparams=best)
            for s in seeds]


def shard_path(grid: str, shard: tuple[int, int]) -> Path:
    k, n = shard
    return RESULTS / (f"{grid}.jsonl" if n == 1 else f"{grid}.shard{k}of{n}.jsonl")


def claims_dir(grid: str) -> Path:
    """Where the processes of one grid claim the cell each is running (ignored by git)."""
    return RESULTS / ".claims" / grid


def all_records(grid: str) -> list[dict]:
    """Finished cells of every file of the grid (the main file and any shard files), one record per
    cell key: a cell run twice (on the CPU here and in a GPU lease's shard file, say) counts once, as
    its first record in file-name order, so no seed is counted twice in a mean or a standard error."""
    out, seen = [], set()
    for path in sorted(RESULTS.glob(f"{grid}*.jsonl")):
        if path.name == f"{grid}.jsonl" or path.name.startswith(f"{grid}.shard"):
            for r in read_records(path):
                if r.get("status", "ok") == "ok" and r["key"] not in seen:
                    seen.add(r["key"])
                    out.append(r)
    return out


def selected(records: Sequence[Mapping], group, fx: Fixed) -> dict | None:
    from raptor.analysis.paper_table import select_best

    fixed = fixed_choice(group, fx)
    if fixed is not None:
        return fixed
    best = select_best([r for r in records if _group_of(r) == group and in_space(r, fx)])
    return best.get(group)


def _group_of(record: Mapping) -> tuple:
    c = record["cell"]
    return (c["model"], c["task"], c["method"], c["epsilon"])


def run(args, fx: Fixed) -> None:
    from tqdm.auto import tqdm

    gs = [g for i, g in enumerate(groups(args, fx)) if i % args.shard[1] == args.shard[0]]
    path = shard_path(args.grid, tuple(args.shard))
    done = {r["key"] for r in all_records(args.grid)}
    total = sum((len(search_space(g[2])) * len(args.tune_seeds) if tuned(g[2]) else 0) + len(args.seeds) for g in gs)
    bar = tqdm(total=total, desc=args.grid, unit="cell", dynamic_ncols=True)
    # a tree copied to another machine (the GPU lease) has no .git: its launcher names the commit
    rev = git_revision(HERE)
    rev = os.environ.get("RAPTOR_GIT_REVISION", rev) if rev == "unknown" else rev
    deadline = None if args.stop_at is None else _deadline(args.stop_at)
    claims = claims_dir(args.grid)

    def runner(cell: Cell) -> dict:
        result, _ = train_cell(cell, fx)
        return result

    def run_cells(cells: Sequence[Cell]) -> bool:
        """Run ``cells`` one by one (each appended to the JSONL); False once --stop-at has passed.
        A cell that another process is running (its claim, :mod:`raptor.analysis.claims`) or has
        finished meanwhile is skipped: a rerun takes up what is left."""
        for c in cells:
            if deadline is not None and time.time() > deadline:
                bar.close()
                print(f"stopped at --stop-at {args.stop_at}: the rest of the grid is left for a rerun", flush=True)
                return False
            bar.set_postfix_str(c.label()[:70])
            run_grid([c], path, runner, progress=False, on_error=args.on_error, revision=rev, claims=claims,
                     finished=lambda: {r["key"] for r in all_records(args.grid)})
            bar.update(1)
        return True

    for g in gs:
        tune = tune_cells(g, fx, args.tune_seeds)
        pending = [c for c in tune if c.key not in done]
        bar.update(len(tune) - len(pending))
        if not run_cells(pending):
            return
        records = all_records(args.grid)
        done = {r["key"] for r in records}
        if not tuning_done(g, fx, args.tune_seeds, done):  # running elsewhere, or failed under --on-error record
            bar.write(f"group {'/'.join(map(str, g))}: not every tuning cell has finished, so no selection "
                      "and no final seed now (a selection must see the whole search space); rerun later")
            bar.update(len(args.seeds))
            continue
        best = selected(records, g, fx)
        if best is None:
            bar.update(len(args.seeds))
            continue
        final = final_cells(g, fx, best, args.seeds)
        bar.update(sum(c.key in done for c in final))
        if not run_cells([c for c in final if c.key not in done]):
            return
        done = {r["key"] for r in all_records(args.grid)}
    bar.close()


def _deadline(text: str, now: dt.datetime | None = None) -> float:
    """``--stop-at`` as a POSIX time: ``YYYY-MM-DDTHH:MM`` (UTC), or ``HH:MM`` UTC at its next
    occurrence (a time already past today means tomorrow: a grid started at 22:40 with ``--stop-at
    00:50`` runs past midnight). Chained runs that may start after the hour should give the date."""
    now = now or dt.datetime.now(dt.timezone.utc)
    try:
        if "T" in text:
            at = dt.datetime.fromisoformat(text)
            return (at if at.tzinfo else at.replace(tzinfo=dt.timezone.utc)).timestamp()
        hh, mm = (int(v) for v in text.split(":"))
        at = now.replace(hour=hh, minute=mm, second=0, microsecond=0)
    except ValueError as e:
        raise SystemExit(f"--stop-at {text!r}: expected HH:MM or YYYY-MM-DDTHH:MM in UTC ({e})") from None
    return (at if at > now else at + dt.timedelta(days=1)).timestamp()


def stages_line(args, gs: Sequence[tuple]) -> str:
    """What the cells of --plan's count are: tune cells only where a group is tuned (more than one
    configuration), then the final seeds of every group."""
    n_tuned = sum(tuned(g[2]) for g in gs)
    finals = f"{len(args.seeds)} final seed(s) per group"
    if n_tuned == 0:
        return f"one fixed configuration per method, no tuning stage; {finals}"
    k = check_matched_budget(args.methods)
    line = (f"{k} configurations per DP method x {len(args.tune_seeds)} tune seed(s) in {n_tuned} tuned group(s), "
            f"+ {finals}")
    if n_tuned < len(gs):
        line += f"; {len(gs) - n_tuned} group(s) with one fixed configuration run no tuning stage"
    return line


def plan(args, fx: Fixed) -> None:
    gs = groups(args, fx)
    records = all_records(args.grid)
    done = {r["key"] for r in records}
    per_group = {g: (len(search_space(g[2])) * len(args.tune_seeds) if tuned(g[2]) else 0) + len(args.seeds) for g in gs}
    total = sum(per_group.values())
    finished = 0
    for g in gs:
        finished += sum(c.key in done for c in tune_cells(g, fx, args.tune_seeds))
        best = selected(records, g, fx)
        if best is not None:
            finished += sum(c.key in done for c in final_cells(g, fx, best, args.seeds))
    walls = [r["wall_seconds"] for r in records if r.get("wall_seconds")]
    per_cell = sum(walls) / len(walls) if walls else args.seconds_per_cell
    left = total - finished
    print(f"grid {args.grid}: {len(gs)} (model, task, method, epsilon) groups; {total} cells "
          f"({stages_line(args, gs)}); {finished} done, {left} to run")
    print(f"ETA: {left} x {per_cell:.0f} s = {left * per_cell / 3600:.2f} h on one process "
          f"({'measured mean' if walls else 'guess, --seconds-per-cell'}); / {args.shard[1]} with --shard K/{args.shard[1]}")


#: Flags that say how one machine ran its share (threads, shard, wall-clock stop), not what the grid is.
_MACHINE_FLAGS = ("--threads", "--shard", "--stop-at")


def regenerating_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` without :data:`_MACHINE_FLAGS` (``--flag value`` or ``--flag=value``): the command a
    reader reruns to get the same table, free of the writer's ``--stop-at`` and shard."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in _MACHINE_FLAGS:
            skip = True
        elif not a.startswith(tuple(f + "=" for f in _MACHINE_FLAGS)):
            out.append(a)
    return out


def summarize(args, fx: Fixed, argv_of_main: Sequence[str] | None = None) -> dict:
    from raptor.analysis.paper_table import margins, markdown_table, plot_metric_vs_epsilon, select_best
    from raptor.analysis.paper_table import summarize as summarize_records
    from raptor.training.saving.json_io import write_strict_json

    stem = args.summary_name or args.grid
    records = all_records(args.grid)
    best = select_best([r for r in records if in_space(r, fx)])
    for r in records:  # untuned groups (one configuration): their one configuration
        fixed = fixed_choice(_group_of(r), fx)
        if fixed is not None:
            best[_group_of(r)] = fixed
    # a group whose tuning has not run every configuration of the space selects nothing (a grid
    # widened with --configs)
    keys = {r["key"] for r in records}
    tuning_incomplete = sorted((g for g in best if not tuning_done(g, fx, args.tune_seeds, keys)), key=str)
    for g in tuning_incomplete:
        del best[g]
    # final cells whose hparams are the selected ones (a changed selection leaves stale finals out)
    finals = [r for r in records if r["cell"].get("stage") == "final"
              and best.get(_group_of(r)) == dict(r["cell"]["hparams"])]
    summary = summarize_records(finals)
    # verdicts only between groups with every final seed (a stopped grid leaves some groups short)
    complete = {k: v for k, v in summary.items() if v["n"] >= len(args.seeds)}
    # RAPTOR and each of its variants are compared with the best OTHER DP method (never with each other)
    raptors = [m for m in VARIANTS if library_method(m) == "raptor"]
    verdicts = margins(complete, exclude=("nonprivate", *VARIANTS))
    for m in raptors:
        verdicts += margins(complete, method=m, exclude=("nonprivate", "raptor", *(v for v in raptors if v != m)))
    tables, plots = [], []
    settings = sorted({(k[0], k[1]) for k in summary})
    for model, task in settings:
        tables.append(markdown_table(summary, model=model, task=task))
        name = f"{stem}_{task}_{_slug(model)}.png"
        plots.append(str(plot_metric_vs_epsilon(summary, RESULTS / name, model=model, task=task,
                                                colours=VARIANT_COLOURS)))
    tune_rows = {}
    for r in records:
        if r["cell"].get("stage") == "tune" and in_space(r, fx):
            g = _group_of(r)
            tune_rows.setdefault(" / ".join(str(v) for v in g), []).append(
                {"hparams": r["cell"]["hparams"], "seed": r["cell"]["seed"],
                 "selection_metric": r["result"]["selection_metric"], "calibrated_clips": r["result"].get("calibrated_clips")})
    verdict_lines = [f"- {v['model']} / {v['task']} / eps {v['epsilon']}: {v['method']} {v['mean']:.3f} ± {v['std']:.3f} vs "
                     f"{v['best_baseline']} {v['baseline_mean']:.3f} ± {v['baseline_std']:.3f}: margin "
                     f"{v['margin']:+.3f} (se {v['margin_se']:.3f}) -> {v['verdict']}" for v in verdicts]
    out = {
        "grid": args.grid,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "git_revision": git_revision(HERE),
        "model_dir": fx.model_dir,
        "models": {model_label(k, fx.model_dir): k for k in args.models},
        "delta": fx.delta,
        "fixed": {k: v for k, v in vars(fx).items()},
        "data_rule": {r["cell"]["task"]: r["result"]["data_rule"] for r in records if "data_rule" in r["result"]},
        "selection": ("no tuning: one fixed configuration per method (space " + SPACE + ", the raptor demo's "
                      "recipe, chosen earlier by looking at the demo's dev accuracy, one run each; README 'Demo')"
                      if SPACE in ("demo", "demo-expert-lr") else "tuned on a selection split carved from the TRAINING data and declared public (GLUE public "
                      "convention, as raptor train's --public-size slice), never on the dev split; the final "
                      "cells rerun the selected configuration with fresh seeds and report dev"),
        "space": SPACE,
        "search_space": {m: list(search_space(m)) for m in args.methods},
        "configs_per_dp_method": check_matched_budget(list(args.methods)),
        "selected": {" / ".join(str(v) for v in g): h for g, h in best.items()},
        "tuning_incomplete": [" / ".join(str(v) for v in g) for g in tuning_incomplete],
        "summary": [dict(v) for v in summary.values()],
        "margins": verdicts,
        "tuning_runs": tune_rows,
        "plots": plots,
    }
    out["command"] = "python experiments/run_grid.py " + " ".join(
        regenerating_argv(sys.argv[1:] if argv_of_main is None else argv_of_main))
    md = [f"# {stem}", "", f"δ = {fx.delta:g} for every cell; target ε in the columns; " + out["selection"], "",
          f"Regenerate: `{out['command']}` (the runs: the same without `--summarize`).", ""]
    for t in tables:
        md += [t, ""]
    if tuning_incomplete:
        md += [f"Not in the table: {len(tuning_incomplete)} group(s) whose tuning has not run every configuration of "
               "the search space (`--configs`), so they select nothing yet: "
               + "; ".join(out["tuning_incomplete"]) + ".", ""]
    md += ["## RAPTOR against the best other DP method", "", *verdict_lines, ""]
    pairs = warm_vs_random(summary)
    out["warm_vs_random"] = pairs
    if pairs:
        md += ["## Warm start vs random init (same architecture and tokenizer)", "",
               "| task | method | ε | warm | random | warm - random (se) |", "|---|---|---|---|---|---|"]
        md += [f"| {r['task']} | {r['method']} | {'-' if r['epsilon'] is None else format(r['epsilon'], 'g')} | "
               f"{r['warm_mean']:.3f} ± {r['warm_std']:.3f} ({r['n_warm']}) | {r['random_mean']:.3f} ± "
               f"{r['random_std']:.3f} ({r['n_random']}) | {r['diff']:+.3f} ({r['diff_se']:.3f}) |" for r in pairs]
        md.append("")
    write_strict_json(RESULTS / f"{stem}.json", out)
    (RESULTS / f"{stem}.md").write_text("\n".join(md), encoding="utf-8")
    print("\n".join(md))
    print(f"wrote {RESULTS / (stem + '.json')}, {RESULTS / (stem + '.md')} and {len(plots)} PNG(s)")
    return out


def warm_vs_random(summary: Mapping) -> list[dict]:
    """Per (task, method, epsilon) present for a warm model and its ``random(...)`` twin: both
    means, stds and the difference with its standard error."""
    out = []
    for (model, task, method, eps), row in sorted(summary.items(), key=lambda kv: (kv[0][1], kv[0][2], str(kv[0][3]))):
        if model.startswith("random("):
            continue
        twin = summary.get((f"random({model})", task, method, eps))
        if twin is None:
            continue
        se = math.sqrt(row["std"] ** 2 / row["n"] + twin["std"] ** 2 / twin["n"])
        out.append({"task": task, "method": method, "epsilon": eps, "warm_mean": row["mean"], "warm_std": row["std"],
                    "n_warm": row["n"], "random_mean": twin["mean"], "random_std": twin["std"], "n_random": twin["n"],
                    "diff": row["mean"] - twin["mean"], "diff_se": se, "warm_values": row["values"],
                    "random_values": twin["values"]})
    return out


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in text).strip("_")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.strip().split("\n\n")[0])  # the whole first paragraph
    p.add_argument("--grid", default="sst2_switch", help="name: experiments/results/<grid>.jsonl/.json/.md")
    p.add_argument("--model-dir", required=True, help="the warm start: a save_pretrained directory with its tokenizer")
    p.add_argument("--models", nargs="+", default=["warm"], choices=("warm", "random"))
    p.add_argument("--data-dir", default=str(HERE.parent.parent / "shared" / "data" / "glue"))
    p.add_argument("--tasks", nargs="+", default=["sst2"])
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=GRID_METHODS)
    p.add_argument("--epsilons", nargs="+", type=float, default=[0.5, 1.0, 3.0, 8.0])
    p.add_argument("--delta", type=float, default=1e-5, help="one fixed delta for every cell (default 1e-5)")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="final-stage seeds")
    p.add_argument("--tune-seeds", nargs="+", type=int, default=[100], help="tuning-stage seeds")
    p.add_argument("--public-size", type=int, default=500, help="public corpus: records of the training split")
    p.add_argument("--selection-size", type=int, default=500, help="selection split: records of the training split")
    p.add_argument("--max-train", type=int, default=2000, help="private records (a seeded subsample; 0: all)")
    p.add_argument("--max-length", type=int, default=40)
    p.add_argument("--batch-size", type=int, default=128, help="expected Poisson batch size B")
    p.add_argument("--epochs", type=float, default=2.0)
    p.add_argument("--head-init", choices=("random", "label-words", "public-fit"), default="label-words")
    p.add_argument("--micro-batch-size", type=int, default=64)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--device", default="cpu", help="torch device of every cell (cpu, cuda)")
    p.add_argument("--shard", default="0/1", help="K/N: run the groups with index %% N == K (own JSONL file)")
    p.add_argument("--stop-at", default=None,
                   help="HH:MM UTC (its next occurrence) or YYYY-MM-DDTHH:MM UTC: start no new cell after it")
    p.add_argument("--on-error", choices=("raise", "record"), default="record")
    p.add_argument("--configs", type=int, default=2, choices=(1, 2, 3, 4),
                   help="configurations per method (the same for every DP method): the first K of its space")
    p.add_argument("--space", choices=SPACES, default="default",
                   help="search spaces: default (tuned, --configs of each), expert-lr (the same, RAPTOR's "
                        "expert stream at lr / 8 in each of its configurations; the other methods' cells are "
                        "shared with default), shared-ratio-0.9 (the same, RAPTOR's shared ratio 0.9 instead "
                        "of 0.3), first-layer (shared-ratio-0.9 with RAPTOR on MoE layer 0), demo (one fixed configuration per method, the raptor demo's "
                        "recipe; no tuning stage), demo-expert-lr (the same, RAPTOR's expert lr / 8) or paper "
                        "(the reference's protocol: frozen label-word head, LoRA in both streams, last MoE layer; "
                        "with --max-train 0 --batch-size 1024 --epochs 3 the paper table of docs/RESULTS.md)")
    p.add_argument("--summary-name", default=None,
                   help="--summarize writes <name>.json/.md and <name>_*.png (default: the grid's name); "
                        "one grid summarised under two --space choices needs two names")
    p.add_argument("--results-dir", default=str(RESULTS), help="where <grid>.jsonl and the summaries go")
    p.add_argument("--seconds-per-cell", type=float, default=30.0, help="--plan's guess before any cell ran")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--plan", action="store_true", help="print the cell count and an ETA guess; run nothing")
    mode.add_argument("--summarize", action="store_true", help="write <grid>.json/.md and the PNGs; run nothing")
    args = p.parse_args(argv)
    try:
        k, n = (int(v) for v in args.shard.split("/"))
    except ValueError as err:
        raise ConfigError(f"--shard must be K/N with 0 <= K < N, got {args.shard!r}") from err
    if not 0 <= k < n:
        raise ConfigError(f"--shard must be K/N with 0 <= K < N, got {args.shard!r}")
    args.shard = (k, n)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    global RESULTS, CONFIGS, SPACE
    args = parse_args(argv)
    RESULTS = Path(args.results_dir)
    CONFIGS = args.configs
    SPACE = args.space
    torch.set_num_threads(args.threads)
    import transformers

    transformers.logging.set_verbosity_error()  # the load report of every cell's head
    transformers.utils.logging.disable_progress_bar()  # a "Loading weights" bar per cell; the grid has its own
    check_matched_budget(args.methods)
    fx = Fixed(model_dir=str(Path(args.model_dir).resolve()), data_dir=args.data_dir, public_size=args.public_size,
               selection_size=args.selection_size, max_train=args.max_train or None, max_length=args.max_length,
               batch_size=args.batch_size, epochs=args.epochs, delta=args.delta, head=args.head_init,
               micro_batch_size=args.micro_batch_size, device=args.device)
    if args.plan:
        plan(args, fx)
    elif args.summarize:
        summarize(args, fx, argv)
    else:
        run(args, fx)
        print(json.dumps({"grid": args.grid, "file": str(shard_path(args.grid, args.shard))}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
