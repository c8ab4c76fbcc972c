"""LoRA on fused 3-D experts, in a layout the per-record engine can slice per expert.

PEFT's ``target_parameters`` LoRA stores one ``[r*E, in]`` / ``[out, r*E]`` factor pair per fused
weight, so an expert's slice of ``lora_B`` is a strided set of columns; it also computes the
adapted weight through a parametrization that the engine cannot see into. Instead,
:func:`add_expert_lora` gives every fused experts module four new 3-D parameters, one slot per
expert on dim 0 (so each expert's LoRA lands in its own ``expert/l/e`` group):

    gate_up_proj_lora_A [E, r, D]    gate_up_proj_lora_B [E, 2I, r]
    down_proj_lora_A    [E, r, I]    down_proj_lora_B    [E, D, r]

and each projection becomes ``x W[e]^T + (alpha / r) (x A[e]^T) B[e]^T`` (``B = 0`` at start, like
PEFT). The base expert weights are frozen. The model's experts implementation is set to raptor's
(``"raptor"``), which computes this with plain autograd outside an engine call, so evaluation and
the one-record reference use the same function.

Privacy: initialisation draws only from the explicit generator.
"""

from __future__ import annotations

import torch
from torch import nn

from raptor.errors import ConfigError, UnsupportedModelError
from raptor.moe.adapters import get_adapter


def add_expert_lora(model: nn.Module, *, rank: int, alpha: float, generator: torch.Generator,
                    layers: list[int] | None = None, init_std: float | None = None) -> list[str]:
    """Add per-expert LoRA factors to the fused experts of ``layers`` (default: every MoE layer).

    ``A`` ~ N(0, init_std^2) (default ``1/sqrt(in)``) and ``B = 0``. Returns the new parameter names.
    """
    from raptor.per_sample import experts as _experts  # registers the "raptor" implementation

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
        if _experts.has_expert_lora(experts):
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
        experts.config._experts_implementation_internal = _experts.IMPLEMENTATION
    return names
