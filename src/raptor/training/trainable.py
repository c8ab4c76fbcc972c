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
from raptor.training.head_init import HEAD_ATTRS


def head_prefixes(model: nn.Module) -> tuple[str, ...]:
    """Module names of the classification head (``classifier`` or ``score``)."""
    found = tuple(a for a in HEAD_ATTRS if isinstance(getattr(model, a, None), nn.Module))
    if not found:
        raise ConfigError(f"{type(model).__name__} has no classification head ('classifier' or 'score')")
    return found


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _module_param_names(model: nn.Module, module: nn.Module) -> set[str]:
    ids = {id(p) for p in module.parameters()}
    return {n for n, p in model.named_parameters() if id(p) in ids}


def set_trainable(model: nn.Module, layers: Sequence[MoELayerInfo], *, policy: str,
                  trained_layers: Sequence[int]) -> None:
    """requires_grad per the method's trainable-set policy (routers always frozen)."""
    expert_names = {info.index: _module_param_names(model, info.experts) for info in layers}
    router_names = set().union(*(_module_param_names(model, info.router) for info in layers))
    all_experts = set().union(*expert_names.values())
    chosen = set().union(*(expert_names[i] for i in trained_layers)) if trained_layers else set()
    heads = head_prefixes(model)
    last = layers[-1]
    block = block_prefix(last.name)
    for name, p in model.named_parameters():
        if name in router_names:
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
        p.requires_grad_(on)


def apply_lora(model: nn.Module, config: TrainConfig, generator: torch.Generator) -> nn.Module:
    """PEFT LoRA on the family's declared targets, base frozen, head trainable; per-expert LoRA on
    fused experts.

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
    adapter = get_adapter(model)
    names = {n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    targets = sorted(names & set(adapter.lora_targets))
    if not targets:
        raise ConfigError(f"dp-lora: none of {adapter.model_type}'s LoRA targets {adapter.lora_targets} are "
                          f"Linear layers of {type(model).__name__}")
    heads = head_prefixes(model)
    for p in model.parameters():
        p.requires_grad_(False)
    expert_lora: list[str] = []
    if any(info.fused for info in adapter.moe_layers(model)):
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
        if any(_under(name, h) for h in heads) or name in expert_lora:
            p.requires_grad_(True)
    return wrapped
