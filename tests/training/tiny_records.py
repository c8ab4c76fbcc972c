"""Seeded synthetic tokenized records for the method tests (test_methods, test_protocol): ids in
[3, vocab), a random length of 2..T real tokens, binary labels."""

from __future__ import annotations

import torch


def records(n: int, seed: int, vocab: int = 512, T: int = 10) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (n, T), generator=g)
    mask = torch.ones(n, T, dtype=torch.long)
    lengths = torch.randint(2, T + 1, (n,), generator=g)
    mask[torch.arange(T)[None, :] >= lengths[:, None]] = 0
    return {"input_ids": ids, "attention_mask": mask, "labels": torch.randint(0, 2, (n,), generator=g)}


#: train / validation / public splits used by both files
DATA = {"train": records(48, 1), "validation": records(16, 2), "public": records(24, 3)}
