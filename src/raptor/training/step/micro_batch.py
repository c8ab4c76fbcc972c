"""Micro-batch size from a memory budget (``PerformanceConfig.memory_budget_mib``).

The size is the largest m whose estimated peak working memory of one ``engine.compute`` on a
batch of m records of T tokens stays within the budget. The estimate is linear in m, fitted to
two probes of the same engine on SYNTHETIC records (token ids from a fixed public seed, every
token real, label 0): ``peak(m) ~ a + b m`` from m = 2 and m = 4, then
``m = floor((budget - a) / b)``, clamped to [1, ``max_size``]; then the peak is measured at that m
and, while it exceeds the budget (the peak grows faster than linearly: padding, per-record
gradients), m is scaled down by budget / peak and measured again (at most ``VERIFY_ROUNDS`` times).

Privacy: the choice depends only on the model, the engine (method), T = ``TrainConfig.max_length``
(public) and the budget: no private record, and never the realized batch size |S_t|, is read.

What is measured: on CUDA, ``torch.cuda.max_memory_allocated`` above the allocation before the
probe; on CPU, the peak bytes of tensor storage alive at once during the probe (a
``TorchDispatchMode`` over every ATen op, backward included: :func:`peak_tensor_bytes`). Both
exclude the model and optimizer state, which are there whatever the micro-batch size, and the CPU
figure excludes allocator slack and scratch inside kernels, so leave headroom in the budget.
Routing of real text can concentrate tokens more than random ids do; the estimate is a
sizing rule, not a guarantee.
"""

from __future__ import annotations

import gc
import math
import weakref
from dataclasses import dataclass

import torch

PROBE_SIZES = (2, 4)
VERIFY_ROUNDS = 4


@dataclass(frozen=True)
class MicroBatchChoice:
    """The chosen size and the fit it came from (bytes), for results.json."""

    size: int
    budget_bytes: int
    fixed_bytes: float
    per_record_bytes: float
    probes: dict[int, int]

    def to_dict(self) -> dict:
        return {"size": self.size, "budget_mib": self.budget_bytes / 2**20, "fixed_mib": self.fixed_bytes / 2**20,
                "per_record_mib": self.per_record_bytes / 2**20,
                "probes_mib": {str(k): v / 2**20 for k, v in self.probes.items()}}


def peak_tensor_bytes(step) -> int:
    """Peak bytes of tensor storage allocated by ``step()`` and alive at the same time (CPU or any device).

    Storages that existed before the step (parameters, inputs, in-place outputs) are not counted;
    scratch a kernel allocates and frees inside one op is not seen (a lower bound).
    """
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    class _LiveBytes(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.live = 0
            self.peak = 0
            self.sizes: dict[int, int] = {}

        def _free(self, key: int) -> None:
            self.live -= self.sizes.pop(key, 0)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            before = {id(t.untyped_storage()) for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
            out = func(*args, **kwargs)
            for t in tree_leaves(out):
                if not isinstance(t, torch.Tensor):
                    continue
                storage = t.untyped_storage()
                key = id(storage)
                if key in before or key in self.sizes or storage.nbytes() == 0:
                    continue
                self.sizes[key] = storage.nbytes()
                self.live += storage.nbytes()
                self.peak = max(self.peak, self.live)
                weakref.finalize(storage, self._free, key)
            return out

    gc.collect()
    mode = _LiveBytes()
    with mode:
        step()
    return mode.peak


def _synthetic_batch(m: int, T: int, vocab_size: int, device) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)  # public, fixed: the probe reads no record
    ids = torch.randint(min(3, vocab_size - 1), vocab_size, (m, T), generator=gen)
    return {"input_ids": ids.to(device), "attention_mask": torch.ones_like(ids).to(device),
            "labels": torch.zeros(m, dtype=torch.long, device=device)}


def _probe(engine, batch, clip_norms, device: torch.device) -> int:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        start = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        engine.compute(batch, clip_norms)
        torch.cuda.synchronize(device)
        return max(int(torch.cuda.max_memory_allocated(device) - start), 0)
    return peak_tensor_bytes(lambda: engine.compute(batch, clip_norms))


def choose_micro_batch_size(engine, *, seq_len: int, vocab_size: int, budget_mib: float, device="cpu",
                            max_size: int = 4096) -> MicroBatchChoice:
    """The largest micro-batch size whose estimated peak memory fits ``budget_mib`` (see the module doc)."""
    device = torch.device(device)
    keys = getattr(engine, "group_keys", None) or tuple(engine.group_map.keys)
    clip_norms = {k: 1.0 for k in keys}
    params = list(engine.group_map.params.values())
    saved = [p.grad for p in params]
    probes = {m: _probe(engine, _synthetic_batch(m, seq_len, vocab_size, device), clip_norms, device)
              for m in PROBE_SIZES}
    m1, m2 = PROBE_SIZES
    per_record = max((probes[m2] - probes[m1]) / (m2 - m1), 1.0)
    fixed = max(probes[m1] - per_record * m1, 0.0)
    budget = int(budget_mib * 2**20)
    size = min(max(int(math.floor((budget - fixed) / per_record)), 1), max_size)
    for _ in range(VERIFY_ROUNDS):  # the fit is only an estimate: measure at the chosen size, shrink if over
        if size in probes or size == 1:
            break
        probes[size] = _probe(engine, _synthetic_batch(size, seq_len, vocab_size, device), clip_norms, device)
        if probes[size] <= budget:
            break
        size = max(1, min(size - 1, int(math.floor(size * budget / probes[size]))))
    for p, g in zip(params, saved, strict=True):
        p.grad = g
    return MicroBatchChoice(size=size, budget_bytes=budget, fixed_bytes=fixed, per_record_bytes=per_record,
                            probes=probes)


# ------------------------------------------------------------------------------------------------
# Less padding: length-sorted micro-batches of one sampled batch, trailing pad columns trimmed.
# ------------------------------------------------------------------------------------------------

#: batch keys of the records whose trailing padding may be trimmed (every [B, T] tensor among them
#: is sliced alike; a batch with any other key, e.g. per-token answer labels or images, is not trimmed)
TRIMMABLE_KEYS = frozenset({"input_ids", "attention_mask", "labels", "token_type_ids"})


def trimmable(records: dict[str, torch.Tensor]) -> bool:
    """Whether micro-batches of ``records`` may drop their trailing all-padding columns: token
    classification records (``input_ids``, ``attention_mask``, one label per record) only."""
    return (set(records) <= TRIMMABLE_KEYS and "attention_mask" in records and "labels" in records
            and records["labels"].dim() == 1)


def length_sorted_chunks(idx_S: torch.Tensor, lengths_N: torch.Tensor | None, size: int) -> list[torch.Tensor]:
    """The sampled indices ``idx_S`` in micro-batches of ``size``; with ``lengths_N`` (tokens per
    record), sorted by length first (stable), so that each micro-batch holds records of similar
    length and :func:`trim_padding` drops most of its padding.

    Privacy: the clipped sums are sums over the same records whatever their order (only
    floating-point addition order changes); the released gradient and the ledger are unaffected.
    Lengths decide only how the step's compute is scheduled, as the batch size already does."""
    if lengths_N is None or idx_S.numel() <= size:
        return list(idx_S.split(size))
    order = torch.argsort(lengths_N.index_select(0, idx_S), stable=True)
    return list(idx_S.index_select(0, order).split(size))


def trim_padding(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``batch`` without the trailing columns that are padding in every record (at least one column
    kept). Right-padded records then give the same outputs: the model masks padded keys and pools
    over real tokens, so the dropped columns never reached a real token."""
    mask = batch["attention_mask"]
    if mask.dim() != 2 or mask.shape[1] == 0:
        return batch
    real_T = mask.bool().any(dim=0)
    keep = int(real_T.nonzero().max()) + 1 if bool(real_T.any()) else 1
    if keep == mask.shape[1]:
        return batch
    return {k: (v[:, :keep] if v.dim() == 2 and v.shape[1] == mask.shape[1] else v) for k, v in batch.items()}
