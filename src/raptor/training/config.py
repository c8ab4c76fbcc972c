"""Training configuration: privacy-relevant settings kept apart from performance-only ones.

* :class:`PrivacyConfig` — everything that changes the guarantee or the mechanism: (epsilon,
  delta), clip norms, the split of the budget between streams, adjacency, accountant, schedule,
  denominator rule, secure randomness.
* :class:`PerformanceConfig` — micro-batch size, device, dtype: changing them changes speed and
  memory, never what is released (up to floating-point rounding).
* :class:`OptimConfig` — the per-stream optimizer (AdamW (0.9, 0.999) or SGD). One default rule for
  ``raptor.fine_tune`` and ``raptor train``: the learning rate by the model's kind
  (:func:`default_lr`; the field's default is that of a model passed in without a name), the weight
  decay by the optimizer (:func:`default_weight_decay`: 0.01 under AdamW, 0 under SGD).
* :class:`TrainConfig` — the run: method, epochs, expected batch size, seed, output dir, layers.

All are frozen dataclasses validated in ``__post_init__``; errors name the field, the value and
the allowed range. Recipes are functions returning a config (:mod:`raptor.recipes`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields, is_dataclass, replace
from pathlib import Path

from raptor.accounting.events import ACCOUNTANTS, ADJACENCIES
from raptor.accounting.rules import alternating_phase
from raptor.errors import ConfigError
from raptor.shipped import DEFAULT_MODEL  # the model of a run that names none (re-exported)
from raptor.training.methods import METHOD_SPECS

#: Training methods (METHOD.md, "Baselines"): the keys of the method table, its one source.
METHODS: tuple[str, ...] = tuple(METHOD_SPECS)
OPTIMIZERS = ("adamw", "sgd")
DENOMINATORS = ("public", "uniform")
CLIP_RULES = ("uniform", "median-ratio", "quantile")
SHARED_SPLITS = ("none", "head")
DTYPES = ("float32", "float64", "bfloat16")


def setting(default=MISSING, *, flag: str | None = None, section: str | None = None, help: str | None = None,
            default_text: str | None = None, set_by: str | None = None, default_factory=MISSING, **cli):
    """A config field with its command-line metadata: ``flag`` (a first-class ``raptor train`` flag;
    a field without one is set by ``--set PATH=VALUE``), the help ``section`` and ``help`` text,
    ``default_text`` (how ``--help`` states a default given by a rule rather than a value),
    ``set_by`` (the flag that sets this field along with its own, e.g. ``--seed`` for
    ``privacy.secure_rng``: not a ``--set`` path) and
    argparse details in ``cli`` (``choices``, ``metavar``, ``nargs``, ``action``; a callable
    ``choices`` is read when the parser is built). The CLI builds its parser from these
    (:mod:`raptor.cli.flags`)."""
    meta = {"flag": flag, "section": section, "help": help, "default_text": default_text, "set_by": set_by, "cli": cli}
    return field(default=default, default_factory=default_factory, metadata=meta)


def field_flag(path: str, cls: type | None = None) -> str | None:
    """The first-class flag of the dotted config field ``path`` (``privacy.epsilon`` -> ``--epsilon``),
    or None when the field has none (it is set by ``--set``) or does not exist."""
    import typing

    cls = TrainConfig if cls is None else cls
    head, _, rest = path.partition(".")
    found = next((f for f in fields(cls) if f.name == head), None)
    if found is None:
        return None
    if rest:
        inner = typing.get_type_hints(cls)[head]
        return field_flag(rest, inner) if is_dataclass(inner) else None
    return found.metadata.get("flag")


def _err(cls: str, name: str, value, allowed: str) -> ConfigError:
    return ConfigError(f"{cls}.{name} must be {allowed}, got {value!r}")


def _positive(cls: str, name: str, value, *, allow_inf: bool = False) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
    if ok and math.isinf(value) and not allow_inf:
        ok = False
    if not ok or (isinstance(value, float) and math.isnan(value)):
        raise _err(cls, name, value, "a positive number (inf allowed)" if allow_inf else "a positive finite number")


def _choice(cls: str, name: str, value, allowed) -> None:
    if value not in allowed:
        raise _err(cls, name, value, "one of " + ", ".join(repr(a) for a in allowed))


@dataclass(frozen=True)
class Schedule:
    """Which streams update at step t.

    * simultaneous (``alternate=None``): every step releases and applies both streams ("joint");
    * alternating S:X: update t is shared-only if t mod (S+X) < S, else expert-only.
    """

    alternate: tuple[int, int] | None = setting(None, help="S:X alternating schedule as S,X",
                                                default_text="simultaneous")

    def __post_init__(self) -> None:
        if self.alternate is not None:
            a = tuple(self.alternate)
            if len(a) != 2 or any(not isinstance(v, int) or isinstance(v, bool) or v < 1 for v in a):
                raise _err("Schedule", "alternate", self.alternate, "a pair (S, X) of integers >= 1, or None")
            object.__setattr__(self, "alternate", a)

    def phase(self, t: int) -> str:
        """"joint", "shared" or "expert" for update t (0-based)."""
        if t < 0:
            raise ConfigError(f"step index must be >= 0, got {t}")
        return "joint" if self.alternate is None else alternating_phase(t, self.alternate)

    @staticmethod
    def parse(text: str | None) -> Schedule:
        """``None``/"simultaneous" or "S:X"."""
        if text is None or text == "simultaneous":
            return Schedule()
        try:
            s, x = (int(v) for v in text.split(":"))
        except ValueError as err:
            raise ConfigError(f"alternate schedule must look like 'S:X' (e.g. '1:1'), got {text!r}") from err
        return Schedule((s, x))


@dataclass(frozen=True)
class PrivacyConfig:
    """Settings that determine the privacy guarantee and the released mechanism.

    ``epsilon=None`` means no DP (the ``nonprivate`` method only). ``delta=None`` takes the
    accountant's default (< 1/N; the value used is reported). ``clip_shared`` / ``clip_expert`` are
    C_s and the base C for the experts (per-expert C_e come from ``clip_rule`` on PUBLIC norms);
    ``math.inf`` disables clipping (only meaningful with zero noise, for equivalence tests).
    ``shared_ratio`` r splits inverse variances: 1/sigma_s^2 = r/sigma_eff^2, L/sigma_e^2 = (1-r)/sigma_eff^2.
    Default 0.9, not the reference's 0.3: r = 0.3 was the worst setting in every measurement we
    have (README "Results": the SST-2 grid on the shipped warm start, +0.016/+0.016/+0.019 for
    0.9 at epsilon 1/3/8, tied on OLMoE; the demo; full SST-2 at epsilon 8 from random init). On
    a model whose experts carry task signal a lower r may be better: it is ``privacy.shared_ratio``.
    ``noise_multipliers`` = (sigma_s, sigma_e) overrides calibration (experiments/tests; the
    ledger still records what is executed).
    ``shared_split="head"`` (group-wise shared clipping, roles grouping only): the output head
    and the backbone are two groups of the shared stream, each clipped to its own C_g (from the
    PUBLIC median per-record norms m_g: C_g = C_s m_g / ||m||, so the stream's total sensitivity
    stays C_s) and noised with sigma_s sqrt(2): the pair is still one Gaussian of multiplier
    sigma_s (:mod:`raptor.training.step.plan`), so the budget is unchanged. It keeps the head,
    whose per-record norm can be 1000x the backbone's, from eating the backbone's clip.
    """

    epsilon: float | None = setting(8.0, flag="--epsilon", section="privacy", help="total epsilon budget")
    delta: float | None = setting(None, flag="--delta", section="privacy", help="delta",
                                  default_text="a power of ten below 1/(N ln N)")
    clip_shared: float = setting(1.0, flag="--clip", section="privacy", help="shared clip norm C_s (and dense C)")
    clip_expert: float = setting(1.0, help="base expert clip norm C")
    clip_rule: str = setting("uniform", choices=CLIP_RULES, help="per-expert clip norms from public gradient norms")
    clip_quantile: float = setting(0.5, help="the public quantile of clip_rule=quantile")
    shared_ratio: float = setting(0.9, help="share of the budget given to the shared stream")
    adjacency: str = setting("add-remove", choices=ADJACENCIES, help="neighbouring datasets")
    accountant: str = setting("pld", choices=ACCOUNTANTS, help="privacy accountant")
    schedule: Schedule = field(default_factory=Schedule)
    denominator: str = setting("public", choices=DENOMINATORS,
                               help="expert denominators: public n_hat or uniform B/E")
    pseudo_count: float = setting(1.0, help="pseudo-count added to the public owner counts of n_hat")
    secure_rng: bool = setting(True, set_by="--seed")
    noise_multipliers: tuple[float | None, float | None] | None = setting(
        None, help="(sigma_s, sigma_e) instead of the calibrated ones (experiments and tests)", default_text="calibrated")
    shared_split: str = setting(
        "none", choices=SHARED_SPLITS,
        help="head: clip the output head and the backbone as two groups of the shared stream, each at its public "
             "median scale, noised as one Gaussian (same budget)")

    def __post_init__(self) -> None:
        c = "PrivacyConfig"
        _choice(c, "shared_split", self.shared_split, SHARED_SPLITS)
        if self.epsilon is not None:
            _positive(c, "epsilon", self.epsilon)
        if self.delta is not None and not (isinstance(self.delta, float) and 0.0 < self.delta < 1.0):
            raise _err(c, "delta", self.delta, "a float in (0, 1) or None")
        _positive(c, "clip_shared", self.clip_shared, allow_inf=True)
        _positive(c, "clip_expert", self.clip_expert, allow_inf=True)
        _choice(c, "clip_rule", self.clip_rule, CLIP_RULES)
        if not 0.0 < self.clip_quantile <= 1.0:
            raise _err(c, "clip_quantile", self.clip_quantile, "in (0, 1]")
        if not (isinstance(self.shared_ratio, (int, float)) and 0.0 < self.shared_ratio < 1.0):
            raise _err(c, "shared_ratio", self.shared_ratio, "in (0, 1) (use shared-only/expert-only methods for 0/1)")
        _choice(c, "adjacency", self.adjacency, ADJACENCIES)
        _choice(c, "accountant", self.accountant, ACCOUNTANTS)
        _choice(c, "denominator", self.denominator, DENOMINATORS)
        _positive(c, "pseudo_count", self.pseudo_count)
        if not isinstance(self.schedule, Schedule):
            raise _err(c, "schedule", self.schedule, "a Schedule")
        if self.noise_multipliers is not None:
            nm = tuple(self.noise_multipliers)
            if len(nm) != 2 or any(v is not None and not (isinstance(v, (int, float)) and v >= 0) for v in nm):
                raise _err(c, "noise_multipliers", self.noise_multipliers, "a pair (sigma_s, sigma_e) of numbers >= 0 or None")
            object.__setattr__(self, "noise_multipliers", nm)
        if math.isinf(self.clip_shared) or math.isinf(self.clip_expert):
            if self.noise_multipliers is None or any(v not in (None, 0, 0.0) for v in self.noise_multipliers):
                raise ConfigError(
                    "PrivacyConfig: infinite clip norms are only allowed with explicit zero noise "
                    "(noise_multipliers=(0, 0)); give finite clip_shared/clip_expert for DP"
                )


@dataclass(frozen=True)
class PerformanceConfig:
    """Speed/memory only: never changes the released mechanism (beyond rounding).

    ``memory_budget_mib``: when set, the micro-batch size is chosen from it instead of
    ``micro_batch_size``: the largest size whose estimated peak working memory of one engine call
    (activations, per-record state, clipped sums; not the model or optimizer) fits, estimated by
    probing the engine on synthetic records of ``TrainConfig.max_length`` tokens
    (:mod:`raptor.training.step.micro_batch`). It never depends on private data or on |S_t|.
    """

    micro_batch_size: int = setting(32, help="records per engine call; memory only, no effect on the result")
    device: str = setting("cpu", flag="--device", section="run", help="cpu, cuda, cuda:N or mps")
    dtype: str = setting("float32", choices=DTYPES,
                         help="weights and activations (bfloat16 on GPUs: norms, clip factors, sums, noise and the "
                              "optimizer's master weights stay float32)")
    eval_batch_size: int = setting(64, help="records per evaluation batch")
    memory_budget_mib: float | None = setting(
        None, help="choose the micro-batch size from this budget of working memory per engine call (probed on "
                   "synthetic records of max_length tokens; overrides micro_batch_size)", default_text="none")

    def __post_init__(self) -> None:
        c = "PerformanceConfig"
        for name in ("micro_batch_size", "eval_batch_size"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise _err(c, name, v, "an integer >= 1")
        _choice(c, "dtype", self.dtype, DTYPES)
        b = self.memory_budget_mib
        if b is not None and (isinstance(b, bool) or not isinstance(b, (int, float)) or not b > 0 or math.isinf(b)):
            raise _err(c, "memory_budget_mib", b, "a positive number of MiB, or None")
        if not isinstance(self.device, str) or not self.device:
            raise _err(c, "device", self.device, "a torch device string such as 'cpu' or 'cuda'")


#: default learning rates (:func:`default_lr`): a tiny model (a random-init family, or the shipped
#: warm start, 2.9 M parameters) needs a larger step than a large pre-trained one. For the shipped
#: model the grid's matched tuning (experiments/results/sst2_switch.json, AdamW lr 5e-4 vs 2e-3,
#: selected on a public split) chose 2e-3 in 15 of its 16 DP groups and 3e-3 non-privately.
TINY_LR: float = 3e-3
#: a pre-trained model's full weights
PRETRAINED_LR: float = 2e-4
#: a pre-trained model under LoRA (r 8): the minilm-moe tables' best private setting (docs/RESULTS.md)
PRETRAINED_LORA_LR: float = 5e-3
#: weight decay by optimizer (:func:`default_weight_decay`)
WEIGHT_DECAY: dict[str, float] = {"adamw": 0.01, "sgd": 0.0}


def is_tiny_model(model: str | None) -> bool:
    """A tiny random-init family (by name) or the shipped tiny warm start (``switch-public-tiny``);
    anything else (a built pre-trained model such as ``minilm-moe``, a saved directory, a hub name,
    a model passed in without a name) is a pre-trained one."""
    if model is None:
        return False
    from raptor.moe.names import FAMILY_NAMES
    from raptor.shipped import SHIPPED

    return model in FAMILY_NAMES or model in SHIPPED


def check_model_kind(model: str | None, where: str = "default_recipe") -> None:
    """A model named for its defaults is one raptor can tell the kind of: a tiny family, a shipped
    or built model, a directory or a hub name (owner/name); a typo (``switch_transformer``) would
    silently get a pre-trained model's defaults, so it is refused naming the close names."""
    if model is None or "/" in str(model) or is_tiny_model(model) or Path(str(model)).expanduser().exists():
        return
    import difflib

    from raptor.moe.names import FAMILY_NAMES
    from raptor.shipped import available

    known = [*FAMILY_NAMES, *available()]
    if model in known:
        return
    close = difflib.get_close_matches(str(model), known, n=1)
    raise ConfigError(f"{where}: model={model!r} is no tiny family ({', '.join(FAMILY_NAMES)}), shipped or built model "
                      f"({', '.join(available()) or 'none'}), directory or hub name (owner/name)"
                      + (f"; did you mean {close[0]!r}?" if close else ""))


def default_lora(model: str | None) -> bool:
    """Whether a run that does not say trains LoRA adapters: yes on a pre-trained model, no on a
    tiny one (:func:`is_tiny_model`)."""
    return not is_tiny_model(model)


def is_private(method: str) -> bool:
    """Whether ``method`` releases a DP stream (its method row's ``private``; an unknown name is
    refused by :class:`TrainConfig` itself)."""
    spec = METHOD_SPECS.get(method)
    return spec is None or spec.private


def lora_rule(method: str) -> str | None:
    """The LoRA rule of ``method``'s trainable set: "always" (dp-lora), "optional" (``lora`` chooses)
    or "never" (last-layer); None for an unknown name."""
    spec = METHOD_SPECS.get(method)
    return None if spec is None else spec.lora_rule


def method_default_lora(model: str | None, method: str) -> bool:
    """``TrainConfig.lora`` of a run that does not say: :func:`default_lora` for the methods whose
    trainable set LoRA can replace (its LoRA rule is "optional"), False for the rest
    (dp-lora is LoRA by its method, last-layer full weights by its)."""
    spec = METHOD_SPECS.get(method)
    return default_lora(model) and spec is not None and spec.lora_rule == "optional"


def method_default_lr(model: str | None, method: str, lora: bool) -> float:
    """:func:`default_lr` of a run of ``method`` with ``TrainConfig.lora=lora`` (dp-lora trains LoRA
    whatever the flag says)."""
    return default_lr(model, lora=lora or lora_rule(method) == "always")


def default_train_config(method: str = "raptor", model: str | None = DEFAULT_MODEL, lora: bool | None = None):
    """The library's defaults for ``method`` on ``model`` (:func:`raptor.recipes.default_recipe`
    documents them): LoRA on a pre-trained model unless ``lora`` says, the learning rate of the
    model's kind and of LoRA or full weights; ``model=None``: a model passed in without a name, on
    full weights."""
    if lora is not None and not isinstance(lora, bool):
        raise ConfigError(f"lora must be True, False or None (the model's default), got {lora!r}")
    lora = (method_default_lora(model, method) if model is not None else False) if lora is None else lora
    return TrainConfig(method=method, lora=lora, privacy=PrivacyConfig(epsilon=8.0 if is_private(method) else None),
                       optim=OptimConfig(lr=method_default_lr(model, method, lora)))


def default_lr(model: str | None, lora: bool | None = None) -> float:
    """The learning rate of a run that names none: :data:`TINY_LR` for a tiny model
    (:func:`is_tiny_model`); for a pre-trained one :data:`PRETRAINED_LORA_LR` under LoRA and
    :data:`PRETRAINED_LR` on full weights. ``lora=None``: the model's default (:func:`default_lora`)."""
    if is_tiny_model(model):
        return TINY_LR
    return PRETRAINED_LORA_LR if (default_lora(model) if lora is None else lora) else PRETRAINED_LR


def default_weight_decay(optimizer: str) -> float:
    """The weight decay of a run that names none: 0.01 under AdamW, 0 under SGD."""
    return WEIGHT_DECAY[optimizer]


@dataclass(frozen=True)
class OptimConfig:
    """One optimizer per stream. ``lr_expert=None`` uses ``lr`` for the expert stream too. ``lr``
    defaults to :func:`default_lr` of an unnamed model (``raptor train`` gives the model's name);
    ``weight_decay=None`` is the optimizer's default (:func:`default_weight_decay`), resolved before
    a run starts (:func:`resolve_optim`).

    AdamW is nearly invariant to a constant rescaling of the update (the denominator rule),
    SGD is not: use SGD to see the effect of the denominator.
    """

    name: str = setting("adamw", choices=OPTIMIZERS, help="optimizer")
    lr: float = setting(PRETRAINED_LR, flag="--lr", section="optimisation", help="learning rate",
                        default_text=f"{PRETRAINED_LORA_LR:g} for a pre-trained model under LoRA, {PRETRAINED_LR:g} "
                                     f"on its full weights (--no-lora), {TINY_LR:g} for a tiny model")
    lr_expert: float | None = setting(None, help="expert-stream learning rate", default_text="--lr")
    betas: tuple[float, float] = setting((0.9, 0.999), help="AdamW betas")
    eps: float = setting(1e-8, help="AdamW epsilon (numerical, not privacy)")
    weight_decay: float | None = setting(None, help="weight decay", default_text="0.01 under AdamW, 0 under SGD")
    momentum: float = setting(0.0, help="SGD momentum")

    @property
    def effective_weight_decay(self) -> float:
        """``weight_decay``, or the optimizer's default (:func:`default_weight_decay`) when None."""
        return default_weight_decay(self.name) if self.weight_decay is None else self.weight_decay

    def __post_init__(self) -> None:
        c = "OptimConfig"
        _choice(c, "name", self.name, OPTIMIZERS)
        _positive(c, "lr", self.lr)
        if self.lr_expert is not None:
            _positive(c, "lr_expert", self.lr_expert)
        b = tuple(self.betas)
        if len(b) != 2 or any(not 0.0 <= v < 1.0 for v in b):
            raise _err(c, "betas", self.betas, "a pair of numbers in [0, 1)")
        object.__setattr__(self, "betas", b)
        _positive(c, "eps", self.eps)
        if self.weight_decay is not None and not (isinstance(self.weight_decay, (int, float))
                                                  and not isinstance(self.weight_decay, bool) and self.weight_decay >= 0):
            raise _err(c, "weight_decay", self.weight_decay, ">= 0, or None (the optimizer's default)")
        if not 0.0 <= self.momentum < 1.0:
            raise _err(c, "momentum", self.momentum, "in [0, 1)")


@dataclass(frozen=True)
class TrainConfig:
    """A training run. ``batch_size`` is the EXPECTED Poisson batch B (q = B/N); the number of
    updates is T = ceil(N/B) * epochs (or ``steps`` when given), fixed before training.
    ``batch_size=None`` (the default) is :func:`default_batch_size` of the number of private
    records, resolved once N is known (:func:`resolve_batch_size`, called by the run's assembly,
    :func:`raptor.training.run.assemble.assemble_run`); an explicit value is kept as given.
    ``layers`` = "auto" (public routing entropy rule, :mod:`raptor.roles.layer_choice`) or a tuple
    of MoE layer indices, or "last" (the last MoE layer, the reference's choice), or "all" (every MoE
    layer: the reference's non-private upper bound); ``num_auto_layers``
    is how many "auto" picks. LoRA: rank 8, alpha 16 as in the reference, but dropout 0 (the
    reference's 0.05 would draw from torch's global RNG, which raptor never uses). ``lora=True``
    trains LoRA adapters instead of full weights in every method whose trainable set is built from
    roles (raptor, dpsgd, dpsgd-full, shared-only, expert-only): attention LoRA in the shared
    stream, one LoRA per expert of the trained layers in the expert stream, so that ``dpsgd`` stays
    RAPTOR's trainable set under one clip (dp-lora is always LoRA). ``freeze_head=True`` keeps the
    output head at its initial (e.g. label-word) weights: it is in no clipping group and never
    updated (the reference's protocol).
    """

    method: str = setting("raptor", flag="--method", section="method", help="training method",
                          choices=lambda: tuple(METHOD_SPECS))
    epochs: float = setting(3.0, flag="--epochs", section="optimisation", help="passes over the private data")
    steps: int | None = setting(None, flag="--steps", section="optimisation", help="planned updates",
                                default_text="from --epochs")
    batch_size: int | None = setting(None, flag="--batch-size", section="optimisation",
                                     help="expected Poisson batch size B, q = B/N",
                                     default_text="N/10, at least 8, at most 1024")
    seed: int | None = setting(None, flag="--seed", section="privacy", help="seeded, reproducible and NOT secure run",
                               default_text="OS CSPRNG")
    output_dir: str = setting("runs/train", flag="--output-dir", section="run",
                              help="results.json, checkpoint/ and model/; must not hold another run unless --overwrite")
    layers: str | tuple[int, ...] = setting(
        "auto", flag="--layers", section="method",
        help="'auto' (the public routing entropy picks one layer; 'auto:K' picks K), 'last' (the last MoE layer), "
             "'all' (every MoE layer) or MoE layer indices, e.g. '1' or '0,1'")
    num_auto_layers: int = setting(1, set_by="--layers auto:K")
    eval_every: int = setting(0, help="evaluate every N steps (0: at the end)")
    max_length: int = setting(128, flag="--max-length", section="data", help="tokens per record")
    lora_rank: int = setting(8, set_by="--lora RANK")
    lora_alpha: float = setting(16.0, help="LoRA alpha")
    lora_dropout: float = setting(0.0, help="LoRA dropout")
    lora: bool = setting(
        False, flag="--lora", section="model", metavar="RANK",
        help="train LoRA adapters of rank RANK (8 when no rank is given) on the method's own set (attention LoRA in "
             "the shared stream, one LoRA per expert of the trained layers in the expert stream); with --method "
             "dp-lora, which is always LoRA, it sets the rank; --no-lora trains the full weights (a pre-trained "
             "--model's lr is then 2e-4 unless --lr is given)",
        default_text="on, r 8, for a pre-trained --model such as minilm-moe; off for a tiny one")
    freeze_head: bool = setting(False, help="keep the output head at its initial (e.g. label-word) weights: in no "
                                            "clipping group, never updated")
    privacy: PrivacyConfig = field(default_factory=PrivacyConfig)
    performance: PerformanceConfig = field(default_factory=PerformanceConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)

    def __post_init__(self) -> None:
        c = "TrainConfig"
        _choice(c, "method", self.method, tuple(METHOD_SPECS))  # read now: a row added to the table is a method
        _positive(c, "epochs", self.epochs)
        if self.steps is not None and (not isinstance(self.steps, int) or self.steps < 1):
            raise _err(c, "steps", self.steps, "an integer >= 1 or None")
        if self.batch_size is not None and (not isinstance(self.batch_size, int) or isinstance(self.batch_size, bool)
                                            or self.batch_size < 1):
            raise _err(c, "batch_size", self.batch_size, "an integer >= 1")
        if self.seed is not None and (not isinstance(self.seed, int) or isinstance(self.seed, bool)
                                      or not 0 <= self.seed < 2**63):  # the generators take 63 bits
            raise _err(c, "seed", self.seed, "an integer in [0, 2**63) or None (secure randomness)")
        if self.layers not in ("auto", "last", "all"):
            lay = tuple(self.layers) if not isinstance(self.layers, str) else None
            if not lay or any(not isinstance(v, int) or v < 0 for v in lay) or len(set(lay)) != len(lay):
                raise _err(c, "layers", self.layers, "'auto', 'last', 'all' or a non-empty tuple of distinct MoE layer "
                           "indices >= 0")
            object.__setattr__(self, "layers", tuple(sorted(lay)))
        for name in ("lora", "freeze_head"):
            if not isinstance(getattr(self, name), bool):
                raise _err(c, name, getattr(self, name), "True or False")
        if self.lora and lora_rule(self.method) == "never":
            raise ConfigError(f"TrainConfig: lora=True (--lora) does not apply to {self.method} (its trainable set is "
                              "full weights by definition); use dp-lora for LoRA on every block")
        for name in ("num_auto_layers", "max_length", "lora_rank"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise _err(c, name, v, "an integer >= 1")
        if not isinstance(self.eval_every, int) or self.eval_every < 0:
            raise _err(c, "eval_every", self.eval_every, "an integer >= 0 (0 = evaluate at the end only)")
        _positive(c, "lora_alpha", self.lora_alpha)
        if not 0.0 <= self.lora_dropout < 1.0:
            raise _err(c, "lora_dropout", self.lora_dropout, "in [0, 1)")
        if not is_private(self.method):
            if self.privacy.epsilon is not None:
                raise ConfigError(f"TrainConfig: the {self.method} method has no epsilon; set privacy.epsilon=None "
                                  f"(got {self.privacy.epsilon!r}), or choose a DP --method")
        elif self.privacy.epsilon is None and self.privacy.noise_multipliers is None:
            raise ConfigError(f"TrainConfig: method {self.method!r} needs privacy.epsilon (or explicit noise_multipliers)")
        if self.seed is not None and self.privacy.secure_rng:
            raise ConfigError(f"TrainConfig: seed={self.seed} asks for a reproducible run, but privacy.secure_rng=True "
                              "asks for OS randomness; set privacy.secure_rng=False with a seed (NOT secure), "
                              "or drop the seed (--seed)")
        if self.seed is None and not self.privacy.secure_rng:
            raise ConfigError("TrainConfig: privacy.secure_rng=False needs a seed (seeded mode is NOT secure)")

    @property
    def output_path(self) -> Path:
        return Path(self.output_dir)

    def num_steps(self, dataset_size: int) -> int:
        """T = ceil(N / B) * epochs (rounded up), or ``steps``: public, fixed before training."""
        if self.steps is not None:
            return self.steps
        batch = self.batch_size if self.batch_size is not None else default_batch_size(dataset_size)
        return max(1, math.ceil(math.ceil(dataset_size / batch) * self.epochs))

    def to_dict(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_dict(d: dict) -> TrainConfig:
        d = dict(d)
        priv = dict(d.pop("privacy", {}))
        sched = priv.pop("schedule", {}) or {}
        alt = sched.get("alternate")
        priv["schedule"] = Schedule(tuple(alt) if alt is not None else None)
        if priv.get("noise_multipliers") is not None:
            priv["noise_multipliers"] = tuple(priv["noise_multipliers"])
        optim = dict(d.pop("optim", {}))
        if "betas" in optim:
            optim["betas"] = tuple(optim["betas"])
        if isinstance(d.get("layers"), list):
            d["layers"] = tuple(d["layers"])
        known = {f.name for f in fields(TrainConfig)}
        unknown = set(d) - known
        if unknown:
            raise ConfigError(f"TrainConfig.from_dict: unknown fields {sorted(unknown)}")
        return TrainConfig(privacy=PrivacyConfig(**priv), performance=PerformanceConfig(**d.pop("performance", {})),
                           optim=OptimConfig(**optim), **d)


def default_batch_size(num_private: int) -> int:
    """The expected batch size when none is given: N/10, at least 8 and at most 1024, and below N,
    so that q = B/N is about 0.1 on small data (a 300-record file gets B = 30, not 1024)."""
    if isinstance(num_private, bool) or not isinstance(num_private, int) or num_private < 0:
        raise ConfigError(f"the number of private records must be an integer >= 0, got {num_private!r}")
    return max(1, min(1024, max(8, num_private // 10), num_private - 1))


def check_batch_size(batch_size: int, dataset_size: int) -> None:
    """The expected Poisson batch size B must satisfy 1 <= B < N (q = B/N in (0, 1)): with B >= N
    every record would be in almost every batch, and subsampling would amplify nothing."""
    if not 1 <= batch_size < dataset_size:
        raise ConfigError(f"batch_size {batch_size} (--batch-size) must be below the {dataset_size} private records "
                          "(and at least 1): lower it or add records")


def resolve_batch_size(config: TrainConfig, num_private: int) -> TrainConfig:
    """``config`` with ``batch_size`` resolved against the ``num_private`` private records (a public
    count): :func:`default_batch_size` when it is None, checked by :func:`check_batch_size` either
    way. Called once per run, by :func:`raptor.training.run.assemble.assemble_run`."""
    if config.batch_size is None:
        config = replace(config, batch_size=default_batch_size(num_private))
    check_batch_size(config.batch_size, num_private)
    return config


def resolve_optim(config: TrainConfig) -> TrainConfig:
    """``config`` with a weight decay left to None set to the optimizer's default
    (:func:`default_weight_decay`), as results.json and a checkpoint's fingerprint record it; called
    once per run by :func:`raptor.training.run.fine_tune.run_fine_tune`. An explicit value is kept."""
    if config.optim.weight_decay is not None:
        return config
    return replace(config, optim=replace(config.optim, weight_decay=config.optim.effective_weight_decay))


def replace_fields(config, changes: Mapping[str, object]):
    """``config`` (a config dataclass) with its dotted fields replaced, e.g. ``{"privacy.epsilon":
    1.0, "optim.lr": 0.1, "privacy.schedule.alternate": (1, 1)}``; each config is rebuilt (and
    validated) once, with all of its changes."""
    nested: dict[str, dict[str, object]] = {}
    direct: dict[str, object] = {}
    for path, value in changes.items():
        head, _, rest = path.partition(".")
        if head not in {f.name for f in fields(config)}:
            raise ConfigError(f"{type(config).__name__} has no field {head!r}; its fields: "
                              f"{', '.join(f.name for f in fields(config))}")
        if rest:
            nested.setdefault(head, {})[rest] = value
        else:
            direct[head] = value
    for head, sub in nested.items():
        inner = direct.get(head, getattr(config, head))
        if not is_dataclass(inner):
            raise ConfigError(f"{type(config).__name__}.{head} has no fields; set it as {head}=VALUE")
        direct[head] = replace_fields(inner, sub)
    return replace(config, **direct) if direct else config
