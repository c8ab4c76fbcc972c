"""The loss contract of the own-loop and ``Trainer`` paths, and its check on public records.

The user's loss reaches the engine as a PER-RECORD loss function ``loss_fn(logits, labels) -> [B]``
(``reduction="none"``): record r's loss depends on record r only. The engine differentiates
``sum_r loss_r`` in one backward, clips each record's gradient per group, sums; the release divides
by the PUBLIC expected batch size B (and n_hat per expert). So "a mean or a sum of per-record losses"
are the same objective here up to the learning rate: a mean over the REALIZED batch would divide
by |S_t|, a private count, and a scalar loss has lost the per-record structure that clipping needs.

Anything that couples records (a batch-normalised loss, a contrastive loss over the batch, a
load-balancing term) is refused: :func:`check_per_record` computes the loss on a public batch at
once and one record at a time, and the two must agree. It is a check on one public batch, not a
proof; its absence of coupling is the user's contract (docs/INTEGRATIONS.md).

Privacy: runs on declared-public records only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch

from raptor.errors import ConfigError

#: records of the public batch the check uses
CHECK_RECORDS = 4


def check_per_record(model, loss_fn: Callable, public: Mapping[str, torch.Tensor], device) -> None:
    """Refuse ``loss_fn`` unless it returns one loss per record, independent of the other records."""
    from raptor.per_sample.engine import model_inputs

    n = min(CHECK_RECORDS, int(public["input_ids"].shape[0]))
    if n < 2:
        return
    batch = {k: v[:n].to(device) for k, v in public.items() if isinstance(v, torch.Tensor)}
    with torch.no_grad():
        logits = model(**model_inputs(batch)).logits
        together = loss_fn(logits, batch["labels"])
        if not isinstance(together, torch.Tensor) or together.shape != (n,):
            shape = tuple(together.shape) if isinstance(together, torch.Tensor) else type(together).__name__
            raise ConfigError(f"loss_fn must return one loss per record, shape ({n},) for {n} records, got {shape}: "
                              "give the per-record losses (reduction='none'); raptor clips each record's gradient and "
                              "forms the sum itself, normalised by the public expected batch size")
        alone = torch.cat([loss_fn(logits[r:r + 1], batch["labels"][r:r + 1]).reshape(1) for r in range(n)])
    if not torch.allclose(together.double(), alone.double(), rtol=1e-5, atol=1e-6, equal_nan=True):
        raise ConfigError("loss_fn couples records: record r's loss on a batch differs from its loss alone "
                          f"({together.tolist()} vs {alone.tolist()} on public records); a batch-normalised or "
                          "batch-contrastive loss cannot be clipped per record: make each record's loss its own")
