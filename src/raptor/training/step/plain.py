"""Ordinary (non-private) gradients behind the engine's interface, for the ``nonprivate`` baseline
and for the "zero noise, no clipping equals plain training" equivalence tests.

Legend: B records, T tokens, K labels.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
from torch import nn

from raptor.roles.groups import GroupKey, GroupMap, ParamSlice


def classification_logits(model: nn.Module, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """logits_BK of a sequence-classification model (no labels passed: the model's own loss is unused)."""
    return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits


@dataclass
class PlainResult:
    """What :class:`PlainEngine` returns: the same fields the trainer reads from an EngineResult."""

    clipped_sums: dict[str, torch.Tensor]
    num_nonfinite: int = 0
    norms: dict = field(default_factory=dict)
    owners: dict = field(default_factory=dict)


class PlainEngine:
    """sum_i grad loss_i over a batch by ordinary autograd (no clipping; one ``dense`` group).

    ``compute`` ignores ``clip_norms``: it is the non-private path. ``loss_fn`` gives per-record
    losses (cross-entropy by default; squared error for a regression head).
    """

    def __init__(self, model: nn.Module, loss_fn=None):
        from raptor.per_sample.engine import cross_entropy_per_record

        self.model = model
        self.loss_fn = loss_fn or cross_entropy_per_record
        params = {n: p for n, p in model.named_parameters() if p.requires_grad}
        self.group_map = GroupMap(groups={GroupKey.dense(): tuple(ParamSlice(n) for n in params)}, params=params)

    def compute(self, batch: Mapping[str, torch.Tensor], clip_norms: Mapping | None = None) -> PlainResult:
        params = self.group_map.params
        if batch["input_ids"].shape[0] == 0:
            return PlainResult({n: torch.zeros_like(p) for n, p in params.items()})
        logits = self.model(**{k: v for k, v in batch.items() if k != "labels"}).logits
        loss = self.loss_fn(logits, batch["labels"]).sum()
        grads = torch.autograd.grad(loss, list(params.values()), allow_unused=True)
        return PlainResult({n: (torch.zeros_like(p) if g is None else g) for (n, p), g in zip(params.items(), grads)})
