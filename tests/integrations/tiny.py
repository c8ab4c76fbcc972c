"""Shared pieces of the integration tests: seeded tiny models and records, a dataset of dict items,
and a spy on ``release_gradients`` that keeps what each update released."""

from __future__ import annotations

import torch

from raptor.moe.models import TinySize, build_model


def records(n: int, seed: int, vocab: int = 512, T: int = 10) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (n, T), generator=g)
    mask = torch.ones(n, T, dtype=torch.long)
    lengths = torch.randint(2, T + 1, (n,), generator=g)
    mask[torch.arange(T)[None, :] >= lengths[:, None]] = 0
    return {"input_ids": ids, "attention_mask": mask, "labels": torch.randint(0, 2, (n,), generator=g)}


TRAIN, PUBLIC = records(40, 1), records(16, 3)


def tiny_model(family: str, seed: int = 5):
    return build_model(family, generator=torch.Generator().manual_seed(seed),
                       size=TinySize(num_experts=4, top_k=1 if family == "bert_moe" else 2), num_labels=2)


class ItemDataset(torch.utils.data.Dataset):
    """Records as a map-style dataset of dict items (what a user's dataset gives)."""

    def __init__(self, tensors: dict[str, torch.Tensor]):
        self.tensors = tensors

    def __len__(self) -> int:
        return int(self.tensors["labels"].shape[0])

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {k: v[i] for k, v in self.tensors.items()}


class ReleaseSpy:
    """Wraps ``release_gradients`` in a module: each call's clipped sums and released gradients."""

    def __init__(self, monkeypatch, module):
        self.calls: list[tuple[dict, dict]] = []
        real = module.release_gradients

        def spy(sums, *args, **kwargs):
            out = real(sums, *args, **kwargs)
            self.calls.append(({k: v.detach().clone() for k, v in sums.items()},
                               {k: v.detach().clone() for k, v in out.items()}))
            return out

        monkeypatch.setattr(module, "release_gradients", spy)


def assert_same_tensors(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for k in a:
        assert torch.equal(a[k], b[k]), k
