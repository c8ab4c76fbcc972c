"""The Poisson loader: the planned, fixed number of Poisson batches of the user's dataset.

Iterating it gives the run's remaining planned updates, one batch each: the whole run (all its
epochs), not one epoch. Each batch is ``collate_fn([dataset[i] for i in S_t])`` with
``S_t = {i : U_i < q}`` drawn by the run's "sample" generator
(:meth:`raptor.integrations.run.PrivateRun.begin`), so its size varies (it may be empty) and no
record is ever skipped or repeated by a shuffle: this is the sampling the accountant assumes.
An empty sample still gives a batch (no records: ``input_ids`` of shape [0, T]) and its update is
still made (noise only), as in ``Trainer.step``.

``len(loader)`` is the number of updates left, a public number. The loader refuses the next batch
until the previous one was released (``loss.backward()`` then ``optimizer.step()``).

Privacy: the sample is private; its indices go to the collator only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from raptor.errors import ConfigError


def _default_collate(items):
    from torch.utils.data import default_collate

    return default_collate(items)


def empty_batch(dataset, collate_fn: Callable):
    """A batch with no records, shaped as the collator shapes one record (the schema only)."""
    one = collate_fn([dataset[0]])
    if not isinstance(one, dict):
        raise ConfigError(f"the collator must return a dict of tensors, got {type(one).__name__}")
    return {k: (v[:0] if isinstance(v, torch.Tensor) else v) for k, v in one.items()}


class PoissonLoader:
    """The remaining planned Poisson batches of ``dataset`` (see the module docstring)."""

    def __init__(self, run, dataset: Sequence, collate_fn: Callable | None = None):
        if len(dataset) != run.num_records:
            raise ConfigError(f"the dataset has {len(dataset)} records, the plan was made for {run.num_records}")
        self._run = run
        self.dataset = dataset
        self.collate_fn = collate_fn or _default_collate

    def __len__(self) -> int:
        return self._run.steps_left

    def __iter__(self):
        return self

    def __next__(self):
        idx = self._run.begin()
        if idx is None:
            raise StopIteration
        if idx.numel() == 0:
            return empty_batch(self.dataset, self.collate_fn)
        batch = self.collate_fn([self.dataset[i] for i in idx.tolist()])
        if not isinstance(batch, dict):
            raise ConfigError(f"the collator must return a dict of tensors (input_ids, attention_mask, labels, ...), "
                              f"got {type(batch).__name__}")
        return batch
