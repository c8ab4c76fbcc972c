"""Step plans the trainer follows: the accountant's calibrated BudgetPlan, or a fixed one.

The trainer reads, per update t: ``phase(t)`` ("joint"/"shared"/"expert"), the stream noise
multipliers ``sigma_shared`` / ``sigma_expert``, and ``noise_multiplier_for_step(t)``, the sigma
the ledger records (None: nothing to record, the non-private baseline).

* :func:`raptor.accounting.plan_budget` returns the calibrated plan for DP runs.
* :class:`FixedPlan` takes sigmas as given (experiments, and the zero-noise equivalence tests);
  its ledger sigma is the joint one, sigma_eff = (1/sigma_s^2 + L/sigma_e^2)^(-1/2), or the
  single stream's for alternating phases (sigma_s, or sigma_e / sqrt(L)). Zero noise cannot be
  accounted (epsilon = inf): such a plan records nothing and the run reports epsilon = inf.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from raptor.errors import ConfigError
from raptor.training.config import Schedule


def joint_sigma(sigma_shared: float | None, sigma_expert: float | None, num_layers: int) -> float:
    """(1/sigma_s^2 + L/sigma_e^2)^(-1/2); a stream given as None is not released; 0 if any is 0."""
    inv = 0.0
    if sigma_shared is not None:
        if sigma_shared == 0:
            return 0.0
        inv += 1.0 / sigma_shared**2
    if sigma_expert is not None and num_layers > 0:
        if sigma_expert == 0:
            return 0.0
        inv += num_layers / sigma_expert**2
    if inv == 0.0:
        raise ConfigError("joint_sigma: no stream is released (both sigmas None or no trained layers)")
    return inv ** -0.5


@dataclass(frozen=True)
class FixedPlan:
    """A plan with given sigmas (None = stream not released) on a public schedule."""

    sample_rate: float
    steps: int
    sigma_shared: float | None
    sigma_expert: float | None
    num_layers: int
    schedule: Schedule = Schedule()
    private: bool = True
    delta: float | None = None

    def __post_init__(self) -> None:
        if not 0 < self.sample_rate <= 1:
            raise ConfigError(f"FixedPlan.sample_rate must be in (0, 1], got {self.sample_rate!r}")
        if self.steps < 1:
            raise ConfigError(f"FixedPlan.steps must be >= 1, got {self.steps!r}")

    def phase(self, t: int) -> str:
        return self.schedule.phase(t)

    def noise_multiplier_for_step(self, t: int) -> float | None:
        if not self.private:
            return None
        phase = self.phase(t)
        if phase == "joint":
            s = joint_sigma(self.sigma_shared, self.sigma_expert, self.num_layers)
        elif phase == "shared":
            s = joint_sigma(self.sigma_shared, None, 0)
        else:
            s = joint_sigma(None, self.sigma_expert, self.num_layers)
        return None if s == 0.0 or math.isinf(s) else s

    def to_dict(self) -> dict:
        return {"kind": "fixed" if self.private else "nonprivate", "sample_rate": self.sample_rate,
                "steps": self.steps, "sigma_shared": self.sigma_shared, "sigma_expert": self.sigma_expert,
                "num_layers": self.num_layers, "alternate": self.schedule.alternate, "delta": self.delta}


def nonprivate_plan(sample_rate: float, steps: int, schedule: Schedule | None = None) -> FixedPlan:
    """Poisson sampling at rate q, no noise, nothing recorded."""
    return FixedPlan(sample_rate, steps, 0.0, 0.0, 0, schedule or Schedule(), private=False)
