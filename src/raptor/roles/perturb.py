"""Owner-map perturbation: a data-independent coin that moves records to a target expert.

With probability ``beta``, independently per record, a record whose owner is not the target
expert is moved to it. This makes the routing of one MoE layer as imbalanced as one wants, from
the natural routing (``beta = 0``) to almost every record on the target (``beta -> 1``): the
experiment of the public denominator's bias against routing imbalance (METHOD.md, "Choosing the
layer to protect").

The coin of record ``i`` is ``u_i = coin(seed, i)``, a uniform in [0, 1) computed by a
counter-based generator keyed by (seed, record id) (a SplitMix64 hash of the pair; never torch's
global RNG). Record ``i`` moves iff ``u_i < beta``. Because the coin depends on the seed and the
record's id only, the same function with the same seed applies alike to the public records (so the
public shares pi_hat, hence n_hat = B pi_hat, are still computed from public data only) and to the
private records, and a record's coin is the same in whatever batch it appears.

Privacy. Without a floor, the perturbed owner of a record is a function of that record (its natural
owner, from the record and the current model) and of a coin independent of the data: adding or
removing a record changes no other record's owner, so each record still touches exactly one
expert sum per layer and the sensitivity (and the accounting) are unchanged. With a floor
(``floor > 0``: never leave an expert below that fraction of the records), whether a record moves
depends on how many other records its expert owns: the owner map then couples records, and
:func:`perturb_owners` refuses a floor unless the caller says the records are public or the use is
a measurement (``coupled_ok=True``); it must never feed a private training run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from raptor.errors import ConfigError

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser on uint64 (vectorised; wraps modulo 2**64)."""
    x = (x + np.uint64(_GOLDEN)).astype(np.uint64)
    x = ((x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)).astype(np.uint64)
    x = ((x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)).astype(np.uint64)
    return x ^ (x >> np.uint64(31))


def owner_coins(seed: int, record_ids: torch.Tensor | np.ndarray | list[int]) -> torch.Tensor:
    """Uniform coins in [0, 1), float64 ``[B]``, one per record id, keyed by ``(seed, id)``.

    Counter-based: ``coin(seed, i)`` depends on ``seed`` and ``i`` only (not on the order, the batch
    or any other record), from two rounds of SplitMix64. Not a secure generator: the coin is part of
    an experiment's design, public by construction, and carries no privacy.
    """
    ids = np.asarray(torch.as_tensor(record_ids).reshape(-1).cpu().numpy(), dtype=np.int64)
    if ids.size and ids.min() < 0:
        raise ConfigError(f"record ids must be >= 0, got {int(ids.min())}")
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ConfigError(f"the perturbation seed must be an integer >= 0, got {seed!r}")
    with np.errstate(over="ignore"):
        key = _splitmix64(np.full(ids.shape, int(seed) & _MASK, dtype=np.uint64))
        h = _splitmix64(key ^ ids.astype(np.uint64))
    return torch.from_numpy((h >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53)))


@dataclass(frozen=True)
class OwnerPerturbation:
    """``beta``: the move probability; ``target``: the expert records move to; ``seed``: the coin's
    key; ``floor``: keep every expert at >= ``floor`` x its natural count (0: no floor; a floor
    couples records, see the module docstring)."""

    beta: float
    target: int
    seed: int = 0
    floor: float = 0.0

    def __post_init__(self) -> None:
        if not (isinstance(self.beta, (int, float)) and 0.0 <= float(self.beta) <= 1.0):
            raise ConfigError(f"OwnerPerturbation.beta must be in [0, 1], got {self.beta!r}")
        if not isinstance(self.target, int) or self.target < 0:
            raise ConfigError(f"OwnerPerturbation.target must be an expert id >= 0, got {self.target!r}")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError(f"OwnerPerturbation.seed must be an integer >= 0, got {self.seed!r}")
        if not (isinstance(self.floor, (int, float)) and 0.0 <= float(self.floor) < 1.0):
            raise ConfigError(f"OwnerPerturbation.floor must be in [0, 1), got {self.floor!r}")


def perturb_owners(owner_B: torch.Tensor, record_ids: torch.Tensor | np.ndarray | list[int],
                   spec: OwnerPerturbation, *, num_experts: int, coupled_ok: bool = False) -> torch.Tensor:
    """The perturbed owners ``[B]`` (long, same device): record ``b`` moves to ``spec.target`` iff
    its owner is not the target and ``coin(spec.seed, record_ids[b]) < spec.beta``.

    With ``spec.floor > 0``, an expert keeps at least ``ceil(floor x its natural count in owner_B)``
    records: its would-be movers with the largest coins stay. That depends on the other records of
    ``owner_B`` (the map couples records), so it needs ``coupled_ok=True``: for public records or a
    measurement, never for a private training run.
    """
    owner_B = torch.as_tensor(owner_B)
    if owner_B.dim() != 1:
        raise ConfigError(f"owners must be one id per record, shape [B], got {tuple(owner_B.shape)}")
    if not 0 <= spec.target < num_experts:
        raise ConfigError(f"OwnerPerturbation.target {spec.target} is not an expert of a {num_experts}-expert layer")
    coins = owner_coins(spec.seed, record_ids)
    if coins.shape[0] != owner_B.shape[0]:
        raise ConfigError(f"{owner_B.shape[0]} owners but {coins.shape[0]} record ids")
    owner = owner_B.long().cpu()
    move = (owner != spec.target) & (coins < float(spec.beta))
    if spec.floor > 0:
        if not coupled_ok:
            raise ConfigError("OwnerPerturbation.floor > 0 couples records (whether one moves depends on its expert's "
                              "count): pass coupled_ok=True for public records or a measurement only, never private training")
        for e in range(num_experts):
            if e == spec.target:
                continue
            mine = owner == e
            keep = math.ceil(float(spec.floor) * int(mine.sum()))
            movers = torch.nonzero(move & mine).squeeze(1)
            allowed = int(mine.sum()) - keep
            if movers.numel() > allowed:
                order = torch.argsort(coins[movers], stable=True)  # the smallest coins move first
                move[movers[order[max(allowed, 0):]]] = False
    out = torch.where(move, torch.full_like(owner, spec.target), owner)
    return out.to(owner_B.device)
