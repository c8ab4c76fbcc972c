"""The two seams the trainer is written against: a gradient engine and a noise plan.

* :class:`GradientEngine`: ``raptor.per_sample.PerRecordEngine`` (per-record clipping per group),
  ``raptor.training.step.plain.PlainEngine`` (ordinary autograd) and the tests' one-record-loop engine.
* :class:`NoisePlan`: what the accountant calibrated, per stream; ``raptor.accounting.BudgetPlan``
  (calibrated to (epsilon, delta)) and :class:`raptor.training.step.noise_plans.FixedPlan` (given sigmas, or
  the explicit non-private plan). The trainer never reads a noise plan directly: it reads the
  :class:`~raptor.training.step.plan.StepPlan` built from one.
* :class:`Ledger`: ``raptor.accounting.PrivacyLedger`` (and the tests' stand-in).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

import torch


class EngineOutput(Protocol):
    """What the trainer reads from one ``compute`` call."""

    clipped_sums: Mapping[str, torch.Tensor]
    num_nonfinite: int


class GroupMapLike(Protocol):
    groups: Mapping[object, tuple]   # group key -> ParamSlice(name, index) tuple
    params: Mapping[str, torch.nn.Parameter]


@runtime_checkable
class GradientEngine(Protocol):
    """Clipped per-group gradient sums of a batch, and the group structure they refer to."""

    group_map: GroupMapLike

    def compute(self, batch: Mapping[str, torch.Tensor], clip_norms: Mapping) -> EngineOutput: ...


@runtime_checkable
class NoisePlan(Protocol):
    """Per-stream noise multipliers on a public schedule, and what the ledger records per update.

    ``sigmas`` maps each released stream ("shared", "expert") to its noise multiplier; a stream the
    plan does not release has no entry. ``private`` is False only for the explicit non-private plan
    (nothing recorded).
    """

    sample_rate: float
    steps: int
    sigmas: Mapping[str, float]
    num_layers: int
    delta: float | None
    accountant: str
    adjacency: str

    @property
    def private(self) -> bool: ...

    def phase(self, t: int) -> str: ...

    def noise_multiplier_for_step(self, t: int) -> float | None: ...

    def planned_runs(self) -> tuple: ...

    def to_dict(self) -> dict: ...


class Ledger(Protocol):
    def check_can_record(self, q: float, sigma: float, count: int, epsilon_budget: float,
                         delta: float | None) -> None: ...

    def record(self, q: float, sigma: float, count: int = 1, label: str = "joint") -> None: ...

    def epsilon(self, delta: float) -> float: ...

    def to_dict(self) -> dict: ...

    def __len__(self) -> int: ...
