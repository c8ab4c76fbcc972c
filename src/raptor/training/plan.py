"""Step plans the trainer follows: the accountant's calibrated BudgetPlan, or a fixed one.

The trainer reads, per update t: ``phase(t)`` ("joint"/"shared"/"expert"), the stream noise
multipliers ``sigma_shared`` / ``sigma_expert``, and ``noise_multiplier_for_step(t)``, the sigma
the ledger records (None: nothing to record, the non-private baseline).

* :func:`raptor.accounting.plan_budget` returns the calibrated plan for DP runs.
* :class:`FixedPlan` takes sigmas as given (experiments, and the zero-noise equivalence tests);
  its ledger sigma comes from :func:`raptor.accounting.rules.step_noise_multiplier`: the joint
  sigma_eff = (1/sigma_s^2 + L/sigma_e^2)^(-1/2), or the single stream's for alternating phases
  (sigma_s, or sigma_e / sqrt(L)). Zero noise cannot be
  accounted (epsilon = inf): such a plan records nothing and the run reports epsilon = inf.
"""

from __future__ import annotations

from dataclasses import dataclass

from raptor.accounting.rules import step_noise_multiplier
from raptor.errors import ConfigError
from raptor.training.config import Schedule


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
        released = {"joint": (self.sigma_shared, self.sigma_expert), "shared": (self.sigma_shared,),
                    "expert": (self.sigma_expert,)}[phase]
        if any(s == 0 for s in released if s is not None):
            return None  # zero noise: epsilon = inf, nothing the ledger can account
        return step_noise_multiplier(phase, self.sigma_shared, self.sigma_expert, self.num_layers)

    def to_dict(self) -> dict:
        return {"kind": "fixed" if self.private else "nonprivate", "sample_rate": self.sample_rate,
                "steps": self.steps, "sigma_shared": self.sigma_shared, "sigma_expert": self.sigma_expert,
                "num_layers": self.num_layers, "alternate": self.schedule.alternate, "delta": self.delta}


def nonprivate_plan(sample_rate: float, steps: int, schedule: Schedule | None = None) -> FixedPlan:
    """Poisson sampling at rate q, no noise, nothing recorded."""
    return FixedPlan(sample_rate, steps, 0.0, 0.0, 0, schedule or Schedule(), private=False)
