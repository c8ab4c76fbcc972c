"""Helpers of the per-record engine tests: tiny float64 models and synthetic batches."""

from __future__ import annotations

import torch

from raptor.audit.engine_check import freeze_untrained_experts, synthetic_batch, to_float64
from raptor.moe.models import build_model


def tiny(family: str, *, seed: int = 0, trained=(1,)):
    generator = torch.Generator().manual_seed(seed)
    model = to_float64(build_model(family, generator=generator))
    freeze_untrained_experts(model, trained)
    return model


def batch_for(model, *, batch_size: int = 5, seq_len: int = 8, seed: int = 1):
    return synthetic_batch(model.config.vocab_size, batch_size, seq_len, torch.Generator().manual_seed(seed))


