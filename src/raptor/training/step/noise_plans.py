"""Noise plans: the accountant's calibrated BudgetPlan, a fixed one, or the explicit non-private one.

A noise plan states, per released stream, the noise multiplier (``sigmas``: {stream: sigma}; a
stream it does not release has no entry, and ``sigma_shared`` / ``sigma_expert`` read None), the
public schedule (``phase(t)``) and ``noise_multiplier_for_step(t)``, the sigma the ledger records
(None: nothing to record). The trainer never reads a noise plan: it reads the
:class:`~raptor.training.step.plan.StepPlan` built from one and the public stage.

* :func:`raptor.accounting.plan_budget` returns the calibrated plan for DP runs.
* :class:`FixedPlan` takes sigmas as given (experiments, and the zero-noise equivalence tests);
  its ledger sigma comes from :func:`raptor.accounting.rules.step_noise_multiplier`: the joint
  sigma_eff = (1/sigma_s^2 + L/sigma_e^2)^(-1/2), or the single stream's for alternating phases
  (sigma_s, or sigma_e / sqrt(L)). Zero noise cannot be accounted (epsilon = inf): such a plan
  records nothing and the run reports epsilon = inf.
* :func:`nonprivate_plan`: explicit sigma 0 for both streams, ``private=False``.
* :func:`make_noise_plan`: the one a method and a config call for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from raptor.accounting.rules import step_noise_multiplier
from raptor.errors import ConfigError
from raptor.training.config import Schedule, TrainConfig, check_batch_size
from raptor.training.methods import MethodSpec
from raptor.training.step.release import STREAMS


def released_sigmas(sigmas: Mapping[str, float | None], owner: str) -> dict[str, float]:
    """``sigmas`` as a noise plan holds them: the released streams only (a None value is a stream not
    released), in stream order (shared, expert); ConfigError for a name that is no stream."""
    unknown = sorted(set(sigmas) - set(STREAMS))
    if unknown:
        raise ConfigError(f"{owner}.sigmas names {unknown}, which are not streams; the streams are {STREAMS}")
    return {s: sigmas[s] for s in STREAMS if sigmas.get(s) is not None}


@dataclass(frozen=True)
class FixedPlan:
    """A plan with given sigmas ({stream: sigma} of the released streams; a None value is dropped: that
    stream is not released) on a public schedule."""

    sample_rate: float
    steps: int
    sigmas: Mapping[str, float]
    num_layers: int
    schedule: Schedule = Schedule()
    private: bool = True
    delta: float | None = None
    accountant: str = "pld"
    adjacency: str = "add-remove"

    def __post_init__(self) -> None:
        if not 0 < self.sample_rate <= 1:
            raise ConfigError(f"FixedPlan.sample_rate must be in (0, 1], got {self.sample_rate!r}")
        if self.steps < 1:
            raise ConfigError(f"FixedPlan.steps must be >= 1, got {self.steps!r}")
        object.__setattr__(self, "sigmas", released_sigmas(self.sigmas, "FixedPlan"))
        if not self.sigmas:
            raise ConfigError("FixedPlan releases no stream: sigma_shared and sigma_expert are both None")

    @property
    def sigma_shared(self) -> float | None:
        return self.sigmas.get("shared")

    @property
    def sigma_expert(self) -> float | None:
        return self.sigmas.get("expert")

    def phase(self, t: int) -> str:
        return self.schedule.phase(t)

    def noise_multiplier_for_step(self, t: int) -> float | None:
        if not self.private:
            return None
        phase = self.phase(t)
        released = self.sigmas.values() if phase == "joint" else (self.sigmas.get(phase),)
        if any(s == 0 for s in released if s is not None):
            return None  # zero noise: epsilon = inf, nothing the ledger can account
        return step_noise_multiplier(phase, self.sigma_shared, self.sigma_expert, self.num_layers)

    def planned_runs(self) -> tuple:
        """Nothing is pre-planned against a budget (only a calibrated BudgetPlan does that)."""
        return ()

    def to_dict(self) -> dict:
        return {"kind": "fixed" if self.private else "nonprivate", "sample_rate": self.sample_rate,
                "steps": self.steps, "sigma_shared": self.sigma_shared, "sigma_expert": self.sigma_expert,
                "num_layers": self.num_layers, "alternate": self.schedule.alternate, "delta": self.delta}


def nonprivate_plan(sample_rate: float, steps: int, schedule: Schedule | None = None) -> FixedPlan:
    """Poisson sampling at rate q, explicitly zero noise on both streams, nothing recorded."""
    return FixedPlan(sample_rate, steps, {"shared": 0.0, "expert": 0.0}, 0, schedule or Schedule(), private=False)


def make_noise_plan(config: TrainConfig, spec: MethodSpec, *, dataset_size: int, num_layers: int):
    """The noise plan of a run of the method ``spec`` (:class:`~raptor.training.methods.MethodSpec`)
    releasing ``spec.streams``: calibrated (:func:`raptor.accounting.plan_budget`), fixed sigmas
    (``privacy.noise_multipliers``), or non-private (``spec.private`` False).

    Privacy: public inputs only (N, B, T, L, the config).
    """
    steps = config.num_steps(dataset_size)
    check_batch_size(config.batch_size, dataset_size)
    q = config.batch_size / dataset_size
    from raptor.accounting.events import check_steps

    check_steps(steps, f"--steps {config.steps}" if config.steps is not None else
                f"--epochs {config.epochs:g} of N={dataset_size} records at B={config.batch_size}")
    if not spec.private:
        return nonprivate_plan(q, steps)
    streams = spec.streams
    priv = config.privacy
    alternate = priv.schedule.alternate if spec.alternates else None
    if priv.schedule.alternate is not None and not spec.alternates:
        raise ConfigError("an alternating schedule (privacy.schedule.alternate) applies to a method that releases both "
                          f"streams (raptor), not to {config.method}")
    from raptor.accounting.planning import default_delta, plan_budget

    if priv.noise_multipliers is not None:
        s, e = priv.noise_multipliers
        return FixedPlan(q, steps, {"shared": s if "shared" in streams else None,
                                    "expert": e if "expert" in streams else None},
                         num_layers if "expert" in streams else 0,
                         priv.schedule if alternate else Schedule(),
                         delta=priv.delta or default_delta(dataset_size), accountant=priv.accountant,
                         adjacency=priv.adjacency)

    return plan_budget(dataset_size=dataset_size, batch_size=config.batch_size, epsilon=priv.epsilon,
                       delta=priv.delta, steps=steps, num_layers=max(num_layers, 1),
                       shared_ratio=priv.shared_ratio, alternate=alternate, streams=streams,
                       adjacency=priv.adjacency, accountant=priv.accountant)
