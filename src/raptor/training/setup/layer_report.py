"""``raptor inspect``'s library entry: public routing statistics per MoE layer and the layer(s)
the entropy rule would protect.

Privacy: routes the PUBLIC records only (the caller passes the public corpus); no privacy cost.
"""

from __future__ import annotations

from torch import nn

from raptor.errors import ConfigError
from raptor.moe.adapters import get_adapter
from raptor.roles.layer_choice import LayerChoice, choose_layers
from raptor.roles.public_stats import layer_stats
from raptor.training.config import TrainConfig
from raptor.training.setup.public_stage import public_routing


def layer_report(model: nn.Module, public: dict, *, count: int = 1, batch_size: int = 1024,
                 noise_multiplier: float | None = None, clip_expert: float = 1.0) -> LayerChoice:
    """Per-layer statistics of the owner shares of ``public`` (tokenized public records) and the
    ``count`` layers with the highest routing entropy. With ``noise_multiplier``, each row also
    holds the load-weighted noise variance of an expected batch of ``batch_size`` records at
    expert clip norm ``clip_expert``."""
    layers = len(get_adapter(model).moe_layers(model))
    if count > layers:  # refused as raptor train refuses --layers auto:K above the layers
        raise ConfigError(f"--count {count}: the model has only {layers} MoE layers; give --count {layers} or less")
    model.eval()
    owners = public_routing(model, public, TrainConfig())
    table = []
    for info in get_adapter(model).moe_layers(model):
        variance = {}
        if noise_multiplier is not None:
            d_e = sum(p.numel() for p in info.experts.parameters()) // info.num_experts
            variance = dict(batch_size=batch_size, noise_multiplier=noise_multiplier, clip_norms_E=clip_expert,
                            dims_E=d_e)
        table.append(layer_stats(info.index, owners[info.index], info.num_experts, **variance))
    return LayerChoice(table=tuple(table), chosen=choose_layers(table, min(count, len(table))))
