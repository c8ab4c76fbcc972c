"""A toy "MoE" and a one-record-at-a-time engine implementing the engine contract, so the trainer's
logic (sampling, release, schedule, checkpoints) is tested independently of raptor.per_sample.

Toy model: mean-pooled embedding -> shared linear -> expert[owner] (owner = first token % E) ->
linear head. Layer index 0 is the only "MoE layer".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import torch
from torch import nn

from raptor.roles.groups import GroupMap, ParamSlice

E = 3


@dataclass(frozen=True, order=True)
class ToyKey:
    """Duck-typed group key (kind, layer, expert_id) like raptor.roles.groups.GroupKey."""

    kind: str
    layer: int | None = None
    expert_id: int | None = None

    @property
    def is_expert(self) -> bool:
        return self.kind == "expert"

    def __str__(self) -> str:
        return f"expert/{self.layer}/{self.expert_id}" if self.is_expert else self.kind


class ToyMoE(nn.Module):
    def __init__(self, vocab: int = 20, d: int = 6, num_labels: int = 2, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.embed = nn.Embedding(vocab, d)
        self.shared = nn.Linear(d, d)
        self.experts = nn.ModuleList(nn.Linear(d, d) for _ in range(E))
        self.head = nn.Linear(d, num_labels)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)

    def owners(self, input_ids):
        return input_ids[:, 0] % E

    def forward(self, input_ids, attention_mask):
        m = attention_mask.to(self.embed.weight.dtype).unsqueeze(-1)
        h = (self.embed(input_ids) * m).sum(1) / m.sum(1).clamp(min=1)
        h = torch.tanh(self.shared(h))
        own = self.owners(input_ids)
        out = torch.stack([self.experts[int(o)](h[i]) for i, o in enumerate(own)]) if len(own) else h
        return SimpleNamespace(logits=self.head(torch.tanh(out)))


@dataclass
class ToyResult:
    clipped_sums: dict
    norms: dict
    owners: dict
    num_nonfinite: int = 0
    loss_B: torch.Tensor = field(default_factory=lambda: torch.zeros(0))


class ToyEngine:
    """grouping="roles": shared = embed/shared/head, expert(0, e) = experts[e] (owner only)."""

    def __init__(self, model: ToyMoE):
        self.model = model
        params = {n: p for n, p in model.named_parameters() if p.requires_grad}
        shared = tuple(ParamSlice(n) for n in params if not n.startswith("experts."))
        groups = {ToyKey("shared"): shared}
        for e in range(E):
            groups[ToyKey("expert", 0, e)] = tuple(ParamSlice(n) for n in params if n.startswith(f"experts.{e}."))
        self.group_map = GroupMap(groups=groups, params=params)
        self.calls = []

    def route(self, batch):
        return {0: self.model.owners(batch["input_ids"])}

    def compute(self, batch, clip_norms):
        self.calls.append(int(batch["labels"].shape[0]))
        params = self.group_map.params
        sums = {n: torch.zeros_like(p) for n, p in params.items()}
        owners = self.model.owners(batch["input_ids"])
        norms = {k: torch.zeros(len(owners)) for k in self.group_map.groups}
        for i in range(len(owners)):
            one = {k: v[i:i + 1] for k, v in batch.items()}
            loss = nn.functional.cross_entropy(self.model(one["input_ids"], one["attention_mask"]).logits, one["labels"])
            grads = dict(zip(params, torch.autograd.grad(loss, list(params.values()), allow_unused=True)))
            for key, slices in self.group_map.groups.items():
                if key.is_expert and key.expert_id != int(owners[i]):
                    continue
                gs = [grads[s.name] if grads[s.name] is not None else torch.zeros_like(params[s.name]) for s in slices]
                norm = torch.sqrt(sum((g ** 2).sum() for g in gs))
                norms[key][i] = norm
                c = min(1.0, clip_norms[key] / float(norm)) if float(norm) > 0 else 1.0
                for s, g in zip(slices, gs):
                    sums[s.name] += c * g
        return ToyResult(clipped_sums=sums, norms=norms, owners={0: owners})


def toy_records(n: int, seed: int = 1, T: int = 5, skew: float | None = None):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 20, (n, T), generator=g)
    if skew is not None:  # most records owned by expert 0
        ids[: int(skew * n), 0] = 0
    return {"input_ids": ids, "attention_mask": torch.ones(n, T, dtype=torch.long),
            "labels": torch.randint(0, 2, (n,), generator=g)}


class ListLedger:
    """A stand-in ledger recording (q, sigma) pairs (the real one is raptor.accounting.PrivacyLedger)."""

    def __init__(self, events=None, budget_steps: int | None = None):
        self.events = list(events or [])
        self.budget_steps = budget_steps

    def record(self, q, sigma, count=1, label="joint"):
        self.events.append([q, sigma])

    def check_can_record(self, q, sigma, count, epsilon_budget, delta):
        from raptor.errors import BudgetExceededError
        if self.budget_steps is not None and len(self.events) + count > self.budget_steps:
            raise BudgetExceededError("toy budget exceeded")

    def epsilon(self, delta):
        return 0.1 * len(self.events)

    def to_dict(self):
        return {"events": self.events}

    @staticmethod
    def from_dict(d):
        return ListLedger(d["events"])

    def __len__(self):
        return len(self.events)
