"""Clipping helpers: c = min(1, C / ||g||) per record and group.

The engine (raptor.per_sample) clips per record inside its backward pass; these helpers are the
obviously-correct version used by the trainer's slow paths and by tests.

Legend: B records, G groups.
"""

from __future__ import annotations

import math

import torch

from raptor.errors import ConfigError


def clip_factors(norms_B: torch.Tensor, clip_norm: float) -> torch.Tensor:
    """min(1, C / norm) per record; 1 where the norm is 0; C = inf means no clipping (all 1)."""
    if not clip_norm > 0:
        raise ConfigError(f"clip_norm must be > 0 (inf for no clipping), got {clip_norm!r}")
    if math.isinf(clip_norm):
        return torch.ones_like(norms_B)
    return torch.clamp(clip_norm / norms_B.clamp(min=torch.finfo(norms_B.dtype).tiny), max=1.0)


def clip_and_sum(per_record_B: torch.Tensor, clip_norm: float) -> torch.Tensor:
    """Sum over records of per-record gradients (first dim B) each clipped to L2 norm ``clip_norm``."""
    flat_BP = per_record_B.reshape(per_record_B.shape[0], -1)
    factors_B = clip_factors(flat_BP.norm(dim=1), clip_norm)
    return (flat_BP * factors_B[:, None]).sum(dim=0).reshape(per_record_B.shape[1:])
