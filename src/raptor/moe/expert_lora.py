"""LoRA on fused 3-D experts, in a layout the per-record engine can slice per expert.

PEFT's ``target_parameters`` LoRA stores one ``[r*E, in]`` / ``[out, r*E]`` factor pair per fused
weight, so an expert's slice of ``lora_B`` is a strided set of columns; it also computes the
adapted weight through a parametrization that the engine cannot see into. Instead,
:func:`add_expert_lora` gives every fused experts module four new 3-D parameters, one slot per
expert on dim 0 (so each expert's LoRA lands in its own ``expert/l/e`` group):

    gate_up_proj_lora_A [E, r, D]    gate_up_proj_lora_B [E, 2I, r]
    down_proj_lora_A    [E, r, I]    down_proj_lora_B    [E, D, r]

and each projection becomes ``x W[e]^T + (alpha / r) (x A[e]^T) B[e]^T`` (``B = 0`` at start, like
PEFT). The base expert weights are frozen. The model's experts implementation is set to
:func:`expert_lora_forward` (registered as ``"raptor_expert_lora"`` in transformers'
``ExpertsInterface``): a plain per-expert loop with ordinary autograd, used for evaluation and by
the one-record reference; the per-record engine switches to its recording implementation for the
duration of one call. Calling ``set_experts_implementation`` afterwards would drop the LoRA terms
from plain forwards: don't.

Privacy: initialisation draws only from the explicit generator.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers.integrations.moe import ExpertsInterface

from raptor.errors import ConfigError, UnsupportedModelError
from raptor.moe.adapters import get_adapter

IMPLEMENTATION = "raptor_expert_lora"


def has_expert_lora(experts: nn.Module) -> bool:
    """True when :func:`add_expert_lora` gave these fused experts LoRA factors."""
    return getattr(experts, "gate_up_proj_lora_A", None) is not None


def _projection(experts: nn.Module, x: torch.Tensor, name: str, e: int) -> torch.Tensor:
    out = F.linear(x, getattr(experts, name)[e])
    if not has_expert_lora(experts):  # a layer without LoRA under the same (model-wide) implementation
        return out
    a, b = getattr(experts, f"{name}_lora_A")[e], getattr(experts, f"{name}_lora_B")[e]
    return out + experts.raptor_lora_scaling * F.linear(F.linear(x, a), b)


def expert_lora_forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                        top_k_weights: torch.Tensor) -> torch.Tensor:
    """Fused experts with per-expert LoRA, one expert at a time, plain autograd (the slow, clear path)."""
    out = torch.zeros_like(hidden_states)
    for e in torch.unique(top_k_index).tolist():
        if e < 0 or e >= self.num_experts:
            continue
        tok, pos = torch.where(top_k_index == e)
        x = hidden_states[tok]
        h = self._apply_gate(_projection(self, x, "gate_up_proj", e))
        y = _projection(self, h, "down_proj", e) * top_k_weights[tok, pos, None]
        out.index_add_(0, tok, y.to(out.dtype))
    return out


ExpertsInterface.register(IMPLEMENTATION, expert_lora_forward)


def add_expert_lora(model: nn.Module, *, rank: int, alpha: float, generator: torch.Generator,
                    layers: list[int] | None = None, init_std: float | None = None) -> list[str]:
    """Add per-expert LoRA factors to the fused experts of ``layers`` (default: every MoE layer).

    ``A`` ~ N(0, init_std^2) (default ``1/sqrt(in)``) and ``B = 0``. Returns the new parameter names.
    """
    if rank < 1:
        raise ConfigError(f"rank must be >= 1, got {rank}")
    if not alpha > 0:
        raise ConfigError(f"alpha must be > 0, got {alpha}")
    infos = get_adapter(model).moe_layers(model)
    chosen = {i.index for i in infos} if layers is None else set(layers)
    names: list[str] = []
    for info in infos:
        if info.index not in chosen:
            continue
        experts = info.experts
        if not info.fused or not hasattr(experts, "gate_up_proj") or not hasattr(experts, "down_proj"):
            raise UnsupportedModelError(
                f"MoE layer {info.index} has no fused gate_up_proj/down_proj experts; use PEFT LoRA on its "
                "expert Linear layers instead"
            )
        if has_expert_lora(experts):
            raise ConfigError(f"MoE layer {info.index} already has expert LoRA")
        for pname in ("gate_up_proj", "down_proj"):
            w = getattr(experts, pname)
            w.requires_grad_(False)
            E, d_out, d_in = w.shape
            std = init_std if init_std is not None else d_in ** -0.5
            a = torch.randn((E, rank, d_in), generator=generator, dtype=torch.float32).mul_(std)
            experts.register_parameter(f"{pname}_lora_A", nn.Parameter(a.to(device=w.device, dtype=w.dtype)))
            experts.register_parameter(
                f"{pname}_lora_B", nn.Parameter(torch.zeros((E, d_out, rank), device=w.device, dtype=w.dtype)))
            names += [f"{info.name}.{info.experts_attr}.{pname}_lora_{x}" for x in ("A", "B")]
        experts.raptor_lora_scaling = float(alpha) / rank
        experts.raptor_previous_implementation = experts.config._experts_implementation_internal
        experts.config._experts_implementation_internal = IMPLEMENTATION
    return names


def merge_expert_lora(model: nn.Module) -> nn.Module:
    """Fold every expert LoRA of ``model`` into its fused weights, in place, and remove the factors:
    ``W[e] += (alpha / r) B[e] A[e]`` (the adapted weight the forward uses), computed in float32.
    The experts implementation in use before :func:`add_expert_lora` is restored, so the result is
    a plain model of its family (what ``save_pretrained`` and the release layout hold). Returns
    ``model``."""
    merged = [m for m in model.modules() if has_expert_lora(m)]
    previous = next((m.raptor_previous_implementation for m in merged
                     if getattr(m, "raptor_previous_implementation", IMPLEMENTATION) != IMPLEMENTATION), None)
    with torch.no_grad():
        for experts in merged:
            for pname in ("gate_up_proj", "down_proj"):
                w = getattr(experts, pname)
                a, b = getattr(experts, f"{pname}_lora_A"), getattr(experts, f"{pname}_lora_B")
                w.add_((torch.bmm(b.float(), a.float()) * experts.raptor_lora_scaling).to(w.dtype))
                delattr(experts, f"{pname}_lora_A")
                delattr(experts, f"{pname}_lora_B")
            del experts.raptor_lora_scaling
            experts.__dict__.pop("raptor_previous_implementation", None)
            experts.config._experts_implementation_internal = previous
    return model
