"""The step plan: the one object that states, for update t, what is released and what is accounted.

For every update t, :meth:`StepPlan.step` gives a :class:`Step`: the phase, the groups released
with their (stream, C_g, sigma_g, n_hat_g), the streams whose optimizers step, the sample rate
and the ledger event (the sigma of the single subsampled Gaussian the step is, or None when the
step cannot be accounted: explicit zero noise, or the non-private plan).

Released and accounted come from the same numbers: sigma_g of every released group is its
stream's sigma in the noise plan, and the ledger sigma is the noise plan's
``noise_multiplier_for_step(t)``; :func:`build_step_plan` checks once, before training, that the
two agree for every phase the plan can take (``accounted_sigma`` recomputes the ledger sigma
from the released groups alone: one shared group, and per trained layer one expert group per
record, so sigma_eff = (sum_shared 1/sigma^2 + sum_layers 1/sigma_layer^2)^(-1/2)).

A group released from a stream the noise plan did not plan (sigma None) is an error, never
zero noise; zero noise exists only as an explicit plan (``FixedPlan`` with sigma 0, or
:func:`raptor.training.step.noise_plans.nonprivate_plan`).

Both the calibrated :class:`raptor.accounting.BudgetPlan` and :class:`raptor.training.step.noise_plans.FixedPlan`
produce a step plan through :func:`build_step_plan`; the trainer and its ledger read only the step plan.

Privacy: every input is public (group structure, public clip norms and denominators, the plan).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from raptor.accounting.rules import phase_streams
from raptor.errors import ConfigError
from raptor.training.step.protocols import NoisePlan
from raptor.training.step.release import STREAMS, GroupRelease, stream_of


@dataclass(frozen=True)
class Step:
    """Update t: which groups are released with what, which optimizers step, and the ledger event."""

    t: int
    phase: str
    streams: tuple[str, ...]
    groups: tuple[GroupRelease, ...]
    sample_rate: float
    ledger_sigma: float | None

    @property
    def accounted(self) -> bool:
        return self.ledger_sigma is not None


def accounted_sigma(groups: Sequence[GroupRelease]) -> float | None:
    """The noise multiplier of one update that releases ``groups`` from one Poisson sample.

    A record touches every shared group and, per layer, one expert (its owner; the owner sets are
    disjoint), so its normalised contribution has squared norm sum_shared 1/sigma_g^2 +
    sum_layers 1/sigma_layer^2 (all experts of a layer share the stream's sigma). None when some
    released group has zero noise (not accountable: epsilon = inf).
    """
    if any(g.sigma == 0 for g in groups):
        return None
    inverse = sum(1.0 / g.sigma**2 for g in groups if g.stream == "shared")
    layers: dict[int, set[float]] = {}
    for g in groups:
        if g.stream == "expert":
            layers.setdefault(g.key.layer, set()).add(g.sigma)
    for layer, sigmas in layers.items():
        if len(sigmas) != 1:
            raise ConfigError(f"the experts of layer {layer} have different sigmas {sorted(sigmas)}")
        inverse += 1.0 / next(iter(sigmas)) ** 2
    return 1.0 / math.sqrt(inverse) if inverse > 0 else None


@dataclass(frozen=True)
class StepPlan:
    """Everything the trainer and the ledger need, fixed before training (see the module docstring)."""

    noise: NoisePlan
    groups: tuple[GroupRelease, ...]
    trained_layers: tuple[int, ...]
    grouping: str
    epsilon_budget: float | None = None
    empty_groups: tuple = ()
    public_report: dict = field(default_factory=dict)

    @property
    def sample_rate(self) -> float:
        return self.noise.sample_rate

    @property
    def steps(self) -> int:
        return self.noise.steps

    @property
    def delta(self) -> float | None:
        return self.noise.delta

    @property
    def sigmas(self) -> dict[str, float | None]:
        """{stream: sigma} as planned (None: not released), for reports."""
        return {stream: self.noise.sigmas.get(stream) for stream in STREAMS}

    @property
    def clip_norms(self) -> dict:
        """{GroupKey: C_g} as the engine takes them (groups with no trainable slice get 1.0: they
        contribute nothing and are never released)."""
        table = {key: 1.0 for key in self.empty_groups}
        table.update({g.key: g.clip_norm for g in self.groups})
        return table

    def streams(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(g.stream for g in self.groups))

    def step(self, t: int) -> Step:
        """Update t: the released groups, the streams that step, and the ledger sigma."""
        if not 0 <= t < self.steps:
            raise ConfigError(f"update {t} is outside the plan's {self.steps} updates")
        phase = self.noise.phase(t)
        streams = phase_streams(phase)
        return Step(t=t, phase=phase, streams=streams, groups=tuple(g for g in self.groups if g.stream in streams),
                    sample_rate=self.sample_rate, ledger_sigma=self.noise.noise_multiplier_for_step(t))

    def new_ledger(self):
        """An empty ledger for this plan (with its planned releases), or None for a non-private plan."""
        if not self.noise.private:
            return None
        from raptor.accounting.ledger import PrivacyLedger

        ledger = PrivacyLedger(accountant=self.noise.accountant, adjacency=self.noise.adjacency)
        for run in self.noise.planned_runs():
            ledger.add_planned(run.sample_rate, run.noise_multiplier, run.count, run.label)
        return ledger

    def to_dict(self) -> dict:
        return {
            "grouping": self.grouping,
            "trained_layers": list(self.trained_layers),
            "groups": {str(g.key): g.to_dict() for g in self.groups},
            "public": self.public_report,
        }


def build_step_plan(
    noise: NoisePlan,
    groups: Mapping[object, Sequence],
    *,
    clip_norms: Mapping[object, float],
    denominators: Mapping[object, float],
    trained_layers: Sequence[int],
    grouping: str,
    epsilon_budget: float | None = None,
    public_report: dict | None = None,
) -> StepPlan:
    """The step plan of ``noise`` for the engine's ``groups`` ({key: param slices}).

    Every non-empty group gets its stream's sigma from ``noise`` (a stream the plan does not
    release raises; the G non-empty groups of the shared stream, when it is split, each get
    sigma_s sqrt(G): every record touches all of them, so together they are one Gaussian of
    multiplier sigma_s, and the budget does not change), its clip norm from ``clip_norms`` and its public n_hat from ``denominators``
    (:func:`raptor.roles.public_stats.group_denominators`). Then, for each phase the schedule can
    take, the ledger sigma of the noise plan must equal :func:`accounted_sigma` of the groups that
    phase releases, or this raises.
    """
    sigma_of = noise.sigmas
    # the shared stream's G non-empty groups (backbone and head when split) each touch every record:
    # each gets sigma_s sqrt(G), so that together they are one Gaussian of multiplier sigma_s
    shared_parts = sum(1 for key, slices in groups.items() if slices and stream_of(key) == "shared")
    released, empty = [], []
    for key, slices in groups.items():
        if not slices:
            empty.append(key)
            continue
        stream = stream_of(key)
        if sigma_of.get(stream) is None:
            raise ConfigError(f"group {key} is in stream {stream!r}, which the noise plan does not release "
                              "(its sigma is None): a released stream needs a planned sigma")
        sigma = float(sigma_of[stream]) * (math.sqrt(shared_parts) if stream == "shared" else 1.0)
        released.append(GroupRelease(key, stream, float(clip_norms[key]), sigma, float(denominators[key])))
    plan = StepPlan(noise=noise, groups=tuple(released), trained_layers=tuple(trained_layers), grouping=grouping,
                    epsilon_budget=epsilon_budget, empty_groups=tuple(empty), public_report=public_report or {})
    _check_released_equals_accounted(plan)
    return plan


def _check_released_equals_accounted(plan: StepPlan) -> None:
    seen: set[str] = set()
    for t in range(plan.steps):
        phase = plan.noise.phase(t)
        if phase in seen:
            continue
        seen.add(phase)
        step = plan.step(t)
        if not step.groups:
            raise ConfigError(f"update {t} ({phase}) releases no group: the plan's streams {plan.streams()} "
                              f"do not match its phase")
        if step.ledger_sigma is None:
            if plan.noise.private and all(g.sigma > 0 for g in step.groups):
                raise ConfigError(f"update {t} releases noisy groups but the plan records nothing for it")
            continue
        released = accounted_sigma(step.groups)
        if released is None or not math.isclose(released, step.ledger_sigma, rel_tol=1e-12):
            raise ConfigError(f"update {t} ({phase}): the released groups amount to sigma_eff={released}, "
                              f"the ledger would record {step.ledger_sigma}; the noise plan and the "
                              "released groups disagree (e.g. its num_layers is not the trained layers)")
        if len(seen) == 3:
            break
