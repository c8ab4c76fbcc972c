"""The clipped sums of one Poisson batch that the user's data pipeline collated.

:meth:`raptor.training.step.trainer.Trainer._clipped_sums` gathers the sampled records from the
trainer's tensors; here the batch arrives already gathered (the user's dataset and collator), in
the order of the sampled indices. The same micro-batches are formed from it: sorted by length
(stable) when the batch is trimmable, split into ``micro_batch_size`` records, trailing padding
trimmed, each handed to ``engine.compute``; the engine's clipped sums are added up in that order.
The same records therefore give bit-identical sums on both paths.

Only the clipped sums and the non-finite count (a diagnostic, not DP) leave this function: the
engine's per-record losses, norms, clip factors and owners are dropped with its result.

Privacy: reads the private batch and returns what the Gaussian mechanism releases (the sums).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from raptor.errors import DataError
from raptor.training.step.micro_batch import length_sorted_chunks, trim_padding, trimmable


def num_records(batch: Mapping[str, torch.Tensor]) -> int:
    """Records in a collated batch: the first dimension of its ``input_ids``."""
    ids = batch.get("input_ids") if isinstance(batch, Mapping) else None
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2:
        raise DataError("a batch must be a mapping with input_ids [B,T] (and attention_mask, labels); "
                        f"got {type(batch).__name__} with keys {sorted(batch) if isinstance(batch, Mapping) else '-'}")
    return int(ids.shape[0])


def clipped_sums(engine, batch: Mapping[str, torch.Tensor], clip_norms: Mapping, micro_batch_size: int,
                 device: torch.device) -> tuple[dict[str, torch.Tensor], int]:
    """(the sum of the engine's clipped sums over micro-batches of ``batch``, the number of records
    whose gradient was non-finite and zeroed by the engine)."""
    size = num_records(batch)
    tensors = {k: v for k, v in batch.items() if isinstance(v, torch.Tensor)}
    if len(tensors) != len(batch):
        others = sorted(k for k in batch if k not in tensors)
        raise DataError(f"batch entries {others} are not tensors; the collator must return tensors only")
    trim = trimmable(tensors)
    lengths = tensors["attention_mask"].sum(dim=1) if trim else None
    sums: dict[str, torch.Tensor] = {}
    nonfinite = 0
    for chunk in length_sorted_chunks(torch.arange(size), lengths, micro_batch_size):
        part = {k: v[chunk] for k, v in tensors.items()}
        if trim:
            part = trim_padding(part)
        part = {k: v.to(device) for k, v in part.items()}
        result = engine.compute(part, clip_norms)
        nonfinite += int(result.num_nonfinite)
        for name, s in result.clipped_sums.items():
            sums[name] = s if name not in sums else sums[name] + s
        del result  # owners, per-record losses and norms never leave this function
    return sums, nonfinite
