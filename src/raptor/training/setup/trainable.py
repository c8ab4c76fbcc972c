"""Trainable sets and LoRA set-up: which parameters a method trains (routers always frozen).

dp-lora: LoRA with rank/alpha from the config on the family's declared LoRA targets (attention
q/k/v/o, and Switch's expert ``wi``/``wo``) via PEFT, and
:func:`raptor.moe.expert_lora.add_expert_lora` (one slot per expert) on fused 3-D experts. LoRA
dropout must be 0: dropout draws from torch's global RNG, which raptor never uses (house rule 6);
the reference used 0.05.

Privacy: nothing here reads data.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from raptor.errors import ConfigError
from raptor.moe.adapters import MoELayerInfo, block_prefix, get_adapter
from raptor.training.config import TrainConfig
from raptor.training.methods import ParamRoles, trainable_set
from raptor.training.setup.head_init import HEAD_ATTRS

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


def _frozen(model: nn.Module) -> tuple[str, ...]:
    """Parameters the family keeps frozen in every method (DeepSeek-VL2: vision tower, projector)."""
    return tuple(f.rstrip(".") for f in get_adapter(model).frozen_prefixes)


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _module_param_names(model: nn.Module, module: nn.Module) -> set[str]:
    ids = {id(p) for p in module.parameters()}
    return {n for n, p in model.named_parameters() if id(p) in ids}


def set_trainable(model: nn.Module, layers: Sequence[MoELayerInfo], *, trainable: str,
                  trained_layers: Sequence[int], freeze_shared_experts: bool = False) -> None:
    """requires_grad per the rule of the trainable set ``trainable`` (a key of
    :data:`raptor.training.methods.TRAINABLE_SETS`; routers always frozen; the family's frozen
    prefixes, e.g. DeepSeek-VL2's vision tower, always frozen; ``freeze_shared_experts`` freezes the
    always-on shared experts, the reference's VL2 setting, instead of training them in the shared
    group). A LoRA-only set is built by :func:`apply_lora` instead."""
    rule = trainable_set(trainable).params
    if rule is None:
        raise ConfigError(f"the trainable set {trainable!r} is LoRA adapters only: apply_lora builds it")
    expert_names = {info.index: _module_param_names(model, info.experts) for info in layers}
    router_names = set().union(*(_module_param_names(model, info.router) for info in layers))
    last = layers[-1]
    roles = ParamRoles(experts=frozenset().union(*expert_names.values()),
                       trained_experts=frozenset().union(*(expert_names[i] for i in trained_layers)),
                       last_block=block_prefix(last.name), last_experts=frozenset(expert_names[last.index]),
                       heads=head_prefixes(model))
    frozen = _frozen(model)
    shared_expert_names = set().union(*(_module_param_names(model, m) for info in layers
                                        for m in info.shared_experts)) if freeze_shared_experts else set()
    for name, p in model.named_parameters():
        on = not (name in router_names or any(_under(name, f) for f in frozen)) and rule(name, roles)
        p.requires_grad_(on and name not in shared_expert_names)



def freeze_routers_and_untrained_experts(model: nn.Module, layers: Sequence[MoELayerInfo],
                                         trained_layers: Sequence[int]) -> None:
    """Keep the model's own trainable set (a PEFT model as its user built it), except what no method
    trains: the routers, the family's frozen prefixes and the experts of MoE layers outside
    ``trained_layers``."""
    router_names = set().union(*(_module_param_names(model, info.router) for info in layers))
    untrained = set().union(*(_module_param_names(model, info.experts) for info in layers
                              if info.index not in set(trained_layers)))
    frozen = _frozen(model)
    for name, p in model.named_parameters():
        if name in router_names or name in untrained or any(_under(name, f) for f in frozen):
            p.requires_grad_(False)

def _head_params(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """(name in the base model, parameter) of the output head; a PEFT wrapper is looked through."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    heads = head_prefixes(base)
    return [(n, p) for n, p in base.named_parameters() if any(_under(n, h) for h in heads)]


def head_param_names(model: nn.Module) -> tuple[str, ...]:
    """Names (as ``model.named_parameters()`` gives them, a PEFT wrapper included) of the
    trainable parameters of the output head."""
    ids = {id(p) for _, p in _head_params(model)}
    return tuple(n for n, p in model.named_parameters() if id(p) in ids and p.requires_grad)


def freeze_head(model: nn.Module) -> tuple[str, ...]:
    """Freeze the output head (``freeze_head=True``): it keeps its initial weights, is in no clipping
    group (the group map holds trainable parameters only) and is never updated. A PEFT wrapper is
    looked through. Returns the names of the parameters frozen."""
    params = _head_params(model)
    for _, p in params:
        p.requires_grad_(False)
    return tuple(n for n, _ in params)


def apply_lora(model: nn.Module, config: TrainConfig, generator: torch.Generator, *,
               train_head: bool = True, trainable: str = "lora", trained_layers: Sequence[int] = ()) -> nn.Module:
    """PEFT LoRA on the family's declared targets, base frozen, head trainable unless ``train_head``
    is False; per-expert LoRA on fused experts.

    ``trainable``: the key of a trainable set that takes LoRA
    (:data:`raptor.training.methods.TRAINABLE_SETS`; its ``lora_shared`` and ``lora_experts`` say
    what is adapted): ``"lora"`` (dp-lora: attention and every layer's experts), or the set of a
    roles-built method under ``config.lora``: ``"roles"`` (attention + the experts of
    ``trained_layers``), ``"shared"`` (attention only), ``"experts"`` (the experts of
    ``trained_layers`` only), ``"all"`` (attention + every layer's experts). Expert LoRA of an
    untrained layer is never created, so no expert parameter of it is trainable.

    PEFT initialises A from torch's global RNG; raptor re-draws every A from ``generator``
    (uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)), PEFT's kaiming-uniform(a=sqrt(5)) bound) and keeps
    B = 0, so the adapter starts as the identity update and the draw is reproducible.
    """
    from raptor.moe.peft_lora import peft_lora

    if config.lora_dropout != 0.0:
        raise ConfigError(
            f"TrainConfig.lora_dropout must be 0 for LoRA, got {config.lora_dropout}: dropout draws from torch's "
            "global RNG, which raptor never uses"
        )
    tset = trainable_set(trainable)
    if tset.lora == "never":
        raise ConfigError(f"LoRA does not apply to the trainable set {trainable!r}")
    adapter = get_adapter(model)
    frozen = _frozen(model)
    infos = adapter.moe_layers(model)
    expert_layers = tset.expert_lora_layers([info.index for info in infos], trained_layers)
    expert_prefixes = {info.index: f"{info.name}.{info.experts_attr}" for info in infos}
    train_shared = tset.lora_shared

    def wanted(module_name: str) -> bool:
        owner = next((i for i, pre in expert_prefixes.items() if _under(module_name, pre)), None)
        return train_shared if owner is None else owner in expert_layers

    targets = sorted(n for n, m in model.named_modules() if isinstance(m, nn.Linear)
                     and n.rsplit(".", 1)[-1] in adapter.lora_targets and not any(_under(n, f) for f in frozen)
                     and wanted(n))
    fused_layers = sorted(i.index for i in infos if i.fused and i.index in expert_layers)
    if not targets and not fused_layers:
        raise ConfigError(f"LoRA ({trainable}): none of {adapter.model_type}'s LoRA targets {adapter.lora_targets} are "
                          f"Linear layers of {type(model).__name__} in the trainable set")
    heads = head_prefixes(model)
    for p in model.parameters():
        p.requires_grad_(False)
    expert_lora: list[str] = []
    if fused_layers:
        from raptor.moe.expert_lora import add_expert_lora

        expert_lora = add_expert_lora(model, rank=config.lora_rank, alpha=config.lora_alpha, generator=generator,
                                      layers=fused_layers)
    wrapped = model
    if targets:
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
