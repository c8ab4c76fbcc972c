"""Every method on the same machinery: trainable set, grouping, streams, public statistics, plan.

| method        | trainable set                                   | grouping | streams released        |
|---------------|-------------------------------------------------|----------|-------------------------|
| nonprivate    | shared + experts of the chosen layers           | (plain)  | no clipping, no noise   |
| dpsgd         | shared + experts of the chosen layers           | dense    | one block, one C, one σ |
| dp-lora       | LoRA adapters (attention, Switch experts) + head | dense    | one block               |
| shared-only   | shared parameters (all experts frozen)           | roles    | shared                  |
| expert-only   | experts of the chosen layers (shared frozen)     | roles    | expert                  |
| last-layer    | last MoE block (attention, experts) + head       | dense    | one block               |
| raptor        | shared + experts of the chosen layers            | roles    | shared + expert         |

Every method uses the same Poisson sampling (q = B/N), the same planned number of updates, the
same ledger and accountant. Routers stay frozen in every method (the reference's setting);
``TrainConfig``'s clip norms, learning rate and batch size apply to all methods alike.

Layers: ``layers="auto"`` applies :func:`raptor.roles.layer_choice.choose_from_owners` to the
routing of the PUBLIC corpus; the per-layer table goes into results.json.

dp-lora: LoRA with rank/alpha from the config on attention q/k/v/o (PEFT) and on the experts:
PEFT on Switch's ``wi``/``wo`` Linear layers, :func:`raptor.moe.expert_lora.add_expert_lora`
(one slot per expert) on the fused 3-D experts of OLMoE, Mixtral, Qwen and DeepSeek. LoRA dropout
must be 0: dropout draws from torch's global RNG, which raptor never uses (house rule 5); the
reference used 0.05.

Privacy: everything computed here before training uses the public corpus only (routing, owner
shares, public gradient norms for per-expert clip norms); the private training records are only
handed to the trainer.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from raptor.errors import ConfigError
from raptor.moe.adapters import MoELayerInfo, get_adapter
from raptor.roles import public_stats as ps
from raptor.roles.layer_choice import choose_from_owners
from raptor.training.config import TrainConfig
from raptor.training.head_init import HEAD_ATTRS
from raptor.training.plain import PlainEngine
from raptor.training.plan import FixedPlan, nonprivate_plan
from raptor.training.release import build_stream_setup
from raptor.training.trainer import Records, Trainer


@dataclass(frozen=True)
class MethodSpec:
    """How a method maps onto the machinery."""

    trainable: str            # "roles" | "shared" | "experts" | "last-block" | "lora"
    grouping: str | None      # "roles" | "dense" | None (plain autograd)
    streams: tuple[str, ...]  # released streams, for the budget plan
    uses_layers: bool         # whether layers/"auto" picks the trained MoE layers


METHOD_SPECS: dict[str, MethodSpec] = {
    "nonprivate": MethodSpec("roles", None, (), True),
    "dpsgd": MethodSpec("roles", "dense", ("shared",), True),
    "dp-lora": MethodSpec("lora", "dense", ("shared",), False),
    "shared-only": MethodSpec("shared", "roles", ("shared",), False),
    "expert-only": MethodSpec("experts", "roles", ("expert",), True),
    "last-layer": MethodSpec("last-block", "dense", ("shared",), False),
    "raptor": MethodSpec("roles", "roles", ("shared", "expert"), True),
}

_BLOCK_RE = re.compile(r"^(.*?(?:layers|block|h)\.\d+)\.")


#: output heads: classification (``classifier``, ``score``) or language-model heads (``lm_head``,
#: DeepSeek-VL2's ``language.lm_head``)
OUTPUT_HEADS = (*HEAD_ATTRS, "lm_head", "language.lm_head")


def head_prefixes(model: nn.Module) -> tuple[str, ...]:
    """Module names of the output head (``classifier``, ``score``, ``lm_head`` or ``language.lm_head``)."""
    names = dict(model.named_modules())
    found = tuple(a for a in OUTPUT_HEADS if isinstance(names.get(a), nn.Module))
    if not found:
        raise ConfigError(f"{type(model).__name__} has no output head ({', '.join(OUTPUT_HEADS)})")
    return found


def frozen_prefixes(model: nn.Module) -> tuple[str, ...]:
    """Parameters the family keeps frozen in every method (DeepSeek-VL2: vision tower, projector)."""
    return get_adapter(model).frozen_prefixes


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _module_param_names(model: nn.Module, module: nn.Module) -> set[str]:
    ids = {id(p) for p in module.parameters()}
    return {n for n, p in model.named_parameters() if id(p) in ids}


def set_trainable(model: nn.Module, layers: Sequence[MoELayerInfo], *, policy: str,
                  trained_layers: Sequence[int], freeze_shared_experts: bool = False) -> None:
    """requires_grad per the method's trainable-set policy (routers always frozen; the family's
    frozen prefixes, e.g. DeepSeek-VL2's vision tower, always frozen; ``freeze_shared_experts``
    freezes the always-on shared experts, the reference's VL2 setting, instead of training them in
    the shared group)."""
    expert_names = {info.index: _module_param_names(model, info.experts) for info in layers}
    router_names = set().union(*(_module_param_names(model, info.router) for info in layers))
    all_experts = set().union(*expert_names.values())
    chosen = set().union(*(expert_names[i] for i in trained_layers)) if trained_layers else set()
    heads = head_prefixes(model)
    last = layers[-1]
    match = _BLOCK_RE.match(last.name + ".")
    block = match.group(1) if match else last.name
    frozen = frozen_prefixes(model)
    shared_expert_names = set().union(*(_module_param_names(model, m) for info in layers
                                        for m in info.shared_experts)) if freeze_shared_experts else set()
    for name, p in model.named_parameters():
        if name in router_names or any(_under(name, f.rstrip(".")) for f in frozen):
            on = False
        elif policy == "roles":
            on = name not in all_experts or name in chosen
        elif policy == "shared":
            on = name not in all_experts
        elif policy == "experts":
            on = name in chosen
        elif policy == "last-block":
            on = _under(name, block) or any(_under(name, h) for h in heads)
            on = on and (name not in all_experts or name in expert_names[last.index])
        else:
            raise ConfigError(f"unknown trainable-set policy {policy!r}")
        p.requires_grad_(on and name not in shared_expert_names)


def apply_lora(model: nn.Module, config: TrainConfig, generator: torch.Generator, *,
               train_head: bool = True) -> nn.Module:
    """PEFT LoRA on attention q/k/v/o (+ Switch expert wi/wo), base frozen, head trainable.

    PEFT initialises A from torch's global RNG; raptor re-draws every A from ``generator``
    (uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)), PEFT's kaiming-uniform(a=sqrt(5)) bound) and keeps
    B = 0, so the adapter starts as the identity update and the draw is reproducible.
    """
    from raptor.moe.peft_lora import peft_lora

    if config.lora_dropout != 0.0:
        raise ConfigError(
            f"TrainConfig.lora_dropout must be 0 for dp-lora, got {config.lora_dropout}: dropout draws from torch's "
            "global RNG, which raptor never uses"
        )
    frozen = frozen_prefixes(model)
    wanted = {"q", "k", "v", "o", "q_proj", "k_proj", "v_proj", "o_proj", "wi", "wo"}
    targets = sorted(n for n, m in model.named_modules() if isinstance(m, nn.Linear)
                     and n.rsplit(".", 1)[-1] in wanted and not any(_under(n, f.rstrip(".")) for f in frozen))
    if not targets:
        raise ConfigError(f"dp-lora: no attention/expert Linear layers found in {type(model).__name__}")
    heads = head_prefixes(model)
    for p in model.parameters():
        p.requires_grad_(False)
    expert_lora: list[str] = []
    if any(info.fused for info in get_adapter(model).moe_layers(model)):
        from raptor.moe.expert_lora import add_expert_lora

        expert_lora = add_expert_lora(model, rank=config.lora_rank, alpha=config.lora_alpha, generator=generator)
    wrapped = peft_lora(model, r=config.lora_rank, lora_alpha=config.lora_alpha, lora_dropout=0.0,
                        target_modules=targets, bias="none")
    with torch.no_grad():
        for name, p in wrapped.named_parameters():
            if ".lora_A." in name:
                bound = 1.0 / math.sqrt(p.shape[1])
                p.copy_(torch.rand(p.shape, generator=generator, dtype=torch.float32).mul_(2 * bound).sub_(bound))
            elif ".lora_B." in name:
                p.zero_()
    for name, p in model.named_parameters():
        if (train_head and any(_under(name, h) for h in heads)) or name in expert_lora:
            p.requires_grad_(True)
    return wrapped


def _batches(records: Records, size: int, device) -> list[dict[str, torch.Tensor]]:
    n = int(records["labels"].shape[0])
    return [{k: v[s:s + size].to(device) for k, v in records.items()} for s in range(0, n, size)]


def public_routing(model: nn.Module, public: Records, config: TrainConfig) -> dict[int, torch.Tensor]:
    """{MoE layer: owner_N} of every public record, natural routing, no gradients.

    Privacy: public corpus only.
    """
    from raptor.per_sample.engine import PerRecordEngine

    saved = {n: p.requires_grad for n, p in model.named_parameters()}
    router_engine = PerRecordEngine(model, trained_layers=(), grouping="dense")
    owners = ps.concat_owners(router_engine.route(b) for b in
                              _batches(public, config.performance.eval_batch_size, config.performance.device))
    for n, p in model.named_parameters():
        p.requires_grad_(saved[n])
    return owners


def public_clip_norms(engine, public: Records, config: TrainConfig, trained_layers: Sequence[int]) -> dict:
    """Per-expert clip norms C_e from public unclipped per-record norms (rule from the config).

    Privacy: public corpus only.
    """
    keys = list(engine.group_map.keys)
    inf = {k: math.inf for k in keys}
    collected: dict = {k: [] for k in keys if k.is_expert}
    for batch in _batches(public, config.performance.micro_batch_size, config.performance.device):
        res = engine.compute(batch, inf)
        for k in collected:
            own = res.owners[k.layer] == k.expert_id
            collected[k].append(res.norms[k][own].detach().double().cpu())
    norms = {k: torch.cat(v) if v else torch.zeros(0) for k, v in collected.items()}
    return ps.expert_clip_norms(norms, config.privacy.clip_expert, rule=config.privacy.clip_rule,
                                quantile=config.privacy.clip_quantile)


def make_plan(config: TrainConfig, spec: MethodSpec, *, dataset_size: int, num_layers: int):
    """The budget plan: calibrated (raptor.accounting.plan_budget), fixed sigmas, or non-private."""
    steps = config.num_steps(dataset_size)
    q = config.batch_size / dataset_size
    if not 0 < q <= 1:
        raise ConfigError(f"batch_size {config.batch_size} must be <= the {dataset_size} private records")
    if spec.grouping is None:
        return nonprivate_plan(q, steps)
    priv = config.privacy
    alternate = priv.schedule.alternate if spec.streams == ("shared", "expert") else None
    if alternate is not None and config.method != "raptor":
        raise ConfigError("an alternating schedule applies to the raptor method only")
    from raptor.accounting.planning import default_delta, plan_budget

    if priv.noise_multipliers is not None:
        s, e = priv.noise_multipliers
        return FixedPlan(q, steps, s if "shared" in spec.streams else None, e if "expert" in spec.streams else None,
                         num_layers if "expert" in spec.streams else 0,
                         priv.schedule if alternate else type(priv.schedule)(),
                         delta=priv.delta or default_delta(dataset_size))

    return plan_budget(dataset_size=dataset_size, batch_size=config.batch_size, epsilon=priv.epsilon,
                       delta=priv.delta, steps=steps, num_layers=max(num_layers, 1),
                       shared_ratio=priv.shared_ratio, alternate=alternate, streams=spec.streams,
                       adjacency=priv.adjacency, accountant=priv.accountant)


def build_trainer(config: TrainConfig, model: nn.Module, *, train: Records, validation: Records | None,
                  public: Records, plain: bool = False, objective=None) -> Trainer:
    """Set up ``model`` for ``config.method`` and return a ready :class:`Trainer`.

    ``public`` is the public corpus (tokenized like ``train``); ``train`` is private.
    ``plain=True`` keeps the method's trainable set but uses ordinary autograd gradients (no
    clipping, no noise, nothing recorded): the plain-training reference of the equivalence tests.
    ``objective``: None (classification) or a :class:`raptor.training.generate.GenerativeObjective`
    (answer-only loss, greedy-decoding evaluation, LM head frozen under dp-lora).
    """
    spec = METHOD_SPECS[config.method]
    if plain:
        spec = MethodSpec(spec.trainable, None, (), spec.uses_layers)
    model.to(device=config.performance.device, dtype=getattr(torch, config.performance.dtype))
    model.eval()
    adapter = get_adapter(model)
    adapter.prepare(model)
    layers = adapter.moe_layers(model)
    num_experts = {info.index: info.num_experts for info in layers}
    routing = public_routing(model, public, config)
    choice = choose_from_owners(routing, num_experts, count=min(config.num_auto_layers, len(layers)),
                                pseudo_count=config.privacy.pseudo_count)
    if not spec.uses_layers:
        trained = (layers[-1].index,) if spec.trainable == "last-block" else ()
    elif config.layers == "auto":
        trained = choice.chosen
    else:
        unknown = sorted(set(config.layers) - set(num_experts))
        if unknown:
            raise ConfigError(f"layers {unknown} are not MoE layers; the MoE layers are {sorted(num_experts)}")
        trained = tuple(config.layers)
    if spec.trainable == "lora":
        from raptor.mechanisms import GeneratorSpec

        init = GeneratorSpec(secure=config.privacy.secure_rng, seed=config.seed).make(2)
        model = apply_lora(model, config, init, train_head=objective is None)
    else:
        set_trainable(model, layers, policy=spec.trainable, trained_layers=trained,
                      freeze_shared_experts=objective is not None and objective.freeze_shared_experts)
    loss_kw = {} if objective is None else {"loss_fn": objective.loss_fn}
    if spec.grouping is None:
        engine = PlainEngine(model, **loss_kw)
    else:
        from raptor.per_sample.engine import PerRecordEngine

        engine = PerRecordEngine(model, trained_layers=trained if spec.grouping == "roles" else (),
                                 grouping=spec.grouping, **loss_kw)
    shares = {layer: ps.owner_shares(routing[layer], num_experts[layer], config.privacy.pseudo_count).tolist()
              for layer in trained}
    priv = config.privacy
    clip_experts: Mapping | float = priv.clip_expert
    if spec.grouping == "roles" and trained and priv.clip_rule != "uniform":
        clip_experts = public_clip_norms(engine, public, config, trained)
    setup = build_stream_setup(
        engine.group_map.groups, grouping=spec.grouping or "plain", trained_layers=trained,
        batch_size=config.batch_size, shares=shares, denominator=priv.denominator,
        clip_shared=priv.clip_shared if spec.grouping else math.inf,
        clip_experts=clip_experts if spec.grouping else math.inf,
        public_report={"layer_choice": choice.to_dict(), "public_records": int(public["labels"].shape[0]),
                       "shares": {str(k): v for k, v in shares.items()}},
    )
    plan = make_plan(config, spec, dataset_size=int(train["labels"].shape[0]), num_layers=len(trained))
    ledger = None
    if hasattr(plan, "to_ledger"):
        ledger = plan.to_ledger()  # carries the planned releases: the per-step budget check is O(1)
    elif spec.grouping is not None:
        from raptor.accounting.ledger import PrivacyLedger

        ledger = PrivacyLedger(accountant=priv.accountant, adjacency=priv.adjacency)
    cls = Trainer if objective is None else objective.trainer_class()
    extra = {} if objective is None else {"objective": objective}
    return cls(model=model, engine=engine, train=train, validation=validation, setup=setup, plan=plan,
               ledger=ledger, config=config,
               extra_results={"trained_layers": list(trained), "method_spec": spec.__dict__}, **extra)
