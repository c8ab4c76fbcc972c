"""Budget planning: calibrate sigma_s and sigma_e so that a whole training run meets (epsilon, delta).

Inputs: N records, expected batch B (q = B/N), T updates (T = ceil(N/B) * epochs, or given), the
schedule (joint, or alternating S shared-only / X expert-only steps), L trained MoE layers, the
target (epsilon, delta) and the split ratio r.

How the budget splits
    r is a share of inverse noise variance. One noise scale m (the "step sigma_eff") is calibrated
    and the streams get

        1/sigma_s^2 = r/m^2,    L/sigma_e^2 = (1 - r)/m^2,

    so a joint step has exactly sigma_eff = (1/sigma_s^2 + L/sigma_e^2)^(-1/2) = m. An alternating
    schedule uses the same sigma_s and sigma_e ("the same per phase"): its shared-only steps are
    subsampled Gaussians with sigma_s = m/sqrt(r), its expert-only steps with
    sigma_e/sqrt(L) = m/sqrt(1 - r). Both phases are composed and the single scalar m is
    calibrated so that the composition hits the target; r then sets how that total is shared
    between the phases. With one stream only, r is not used (sigma_s = m, or sigma_e = m sqrt(L)).

Calibration
    epsilon(m) decreases in m. We search m in [SIGMA_MIN, SIGMA_MAX] = [0.3, 1000] with a
    bracketing Illinois (regula falsi) iteration on (log m, log epsilon), always keeping the
    bracket end whose epsilon is <= target, and return that end: the plan is on the safe side.
    Stage 0 finds a warm start with the cheap add/remove RDP accountant to 2% (only a start point). Stage 1 uses the PLD
    accountant at the coarse discretisation 1e-3 (a pessimistic upper bound, about 5x cheaper to
    build) and stops when target * (1 - 4e-3) <= epsilon <= target. Stage 2
    re-evaluates at the reported discretisation 2e-4 (the one the ledger uses) and refines until
    target * (1 - 5e-3) <= epsilon <= target (at most 8 fine evaluations; if those run out the plan is
    still <= target, only less tight). The reported ``epsilon`` is computed exactly as the
    ledger will compute it after the planned updates, so a run that follows the plan never trips
    its own budget check. With ``accountant="rdp"`` a single stage with tolerance 1e-3 is used.

Infeasible targets raise :class:`~raptor.errors.InfeasibleTargetError`:
    * too tight: even m = SIGMA_MAX (1000) spends more than epsilon;
    * too loose: m = SIGMA_MIN (0.3) already meets epsilon. At a noise multiplier below 0.3 a
      record that is sampled is nearly exposed (the unsampled Gaussian alone has epsilon > 15 at
      delta = 1e-6), and PLD accounting becomes slow, so we refuse rather than return a plan whose
      protection rests on the sampling alone.

Default delta: the largest power of ten <= 1/(N max(ln N, 1)), at most 0.1: strictly below 1/N.
A delta >= 1/N is refused: it allows mechanisms that publish a record outright.

Privacy: uses only public quantities (N, B, T, L, r, epsilon, delta).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields

from raptor._quiet_log import ScopedDrop
from raptor.accounting.accountants import (
    COARSE_DISCRETIZATION_INTERVAL,
    VALUE_DISCRETIZATION_INTERVAL,
    epsilon_of,
)
from raptor.accounting.events import (
    EventRun,
    canonical_counts,
    check_accountant,
    check_adjacency,
    check_count,
    check_delta,
    check_epsilon,
    check_sample_rate,
    check_steps,
)
from raptor.accounting.ledger import PrivacyLedger
from raptor.accounting.rules import (
    Phase,
    alternating_phase,
    check_alternate,
    check_shared_ratio,
    joint_noise_multiplier,
    phase_counts,
    split_noise_multiplier,
    step_noise_multiplier,
)
from raptor.errors import ConfigError, InfeasibleTargetError

SIGMA_MIN: float = 0.3
SIGMA_MAX: float = 1000.0
COARSE_RTOL: float = 4e-3
FINE_RTOL: float = 5e-3
RDP_RTOL: float = 1e-3
WARM_START_RTOL: float = 2e-2
MAX_FINE_EVALUATIONS: int = 8
STREAMS: tuple[str, ...] = ("shared", "expert")


def default_delta(dataset_size: int) -> float:
    """Largest power of ten <= 1/(N ln N), at most 0.1: always strictly below 1/N."""
    check_count(dataset_size, "dataset_size")
    raw = 1.0 / (dataset_size * max(math.log(dataset_size), 1.0))
    delta = 10.0 ** math.floor(math.log10(raw) + 1e-12)
    return min(delta, 0.1)


@dataclass(frozen=True)
class BudgetPlan:
    """A calibrated privacy plan: the noise of every stream and what the whole run spends.

    ``sigmas`` is {stream: sigma} of the released streams (``streams``, in that order);
    ``sigma_shared`` / ``sigma_expert`` read it (None: the stream is not released).
    ``noise_multiplier_for_step(t)`` is the sigma to record in the ledger for update t (0-based);
    ``to_ledger()`` gives a ledger pre-loaded with the planned releases.
    """

    dataset_size: int
    batch_size: int
    sample_rate: float
    steps: int
    epochs: float | None
    num_layers: int
    streams: tuple[str, ...]
    shared_ratio: float | None
    alternate: tuple[int, int] | None
    sigmas: Mapping[str, float]
    sigma_eff: float
    epsilon: float
    delta: float
    delta_is_default: bool
    target_epsilon: float
    adjacency: str
    accountant: str
    value_discretization_interval: float | None

    def __post_init__(self) -> None:
        check_sample_rate(self.sample_rate)
        check_count(self.steps, "steps")
        check_delta(self.delta)
        check_epsilon(self.target_epsilon, "target_epsilon")
        check_accountant(self.accountant)
        check_adjacency(self.adjacency)
        unknown = sorted(set(self.sigmas) - set(STREAMS))
        if unknown:
            raise ConfigError(f"sigmas names {unknown}, which are not streams; the streams are {STREAMS}.")
        object.__setattr__(self, "sigmas", {s: self.sigmas[s] for s in STREAMS if self.sigmas.get(s) is not None})
        if ("shared" in self.streams) != (self.sigma_shared is not None):
            raise ConfigError(f"sigma_shared={self.sigma_shared!r} does not match streams={self.streams!r}.")
        if ("expert" in self.streams) != (self.sigma_expert is not None):
            raise ConfigError(f"sigma_expert={self.sigma_expert!r} does not match streams={self.streams!r}.")
        if self.epsilon > self.target_epsilon:
            raise ConfigError(f"epsilon={self.epsilon} exceeds target_epsilon={self.target_epsilon}: "
                              "a plan must be on the safe side.")

    @property
    def sigma_shared(self) -> float | None:
        return self.sigmas.get("shared")

    @property
    def sigma_expert(self) -> float | None:
        return self.sigmas.get("expert")

    @property
    def private(self) -> bool:
        """Always True: every update of a calibrated plan is recorded in the ledger."""
        return True

    def phase(self, t: int) -> Phase:
        """'joint' (both streams each step), or 'shared' / 'expert' (that stream only) for update t."""
        check_count(t, "t", minimum=0)
        if t >= self.steps:
            raise ConfigError(f"t={t} is outside the plan's updates 0..{self.steps - 1}; the plan ends at "
                              f"steps={self.steps}.")
        if self.alternate is not None:
            return alternating_phase(t, self.alternate)
        if len(self.streams) == 2:
            return "joint"
        return "shared" if self.streams == ("shared",) else "expert"

    def noise_multiplier_for_step(self, t: int) -> float:
        """The noise multiplier of update t as one subsampled Gaussian (what the ledger records)."""
        return step_noise_multiplier(self.phase(t), self.sigma_shared, self.sigma_expert, self.num_layers)

    def planned_runs(self) -> tuple[EventRun, ...]:
        """The planned releases, grouped by phase (composition order does not matter)."""
        return _planned_runs(self.sample_rate, self.steps, self.sigma_shared, self.sigma_expert,
                             self.num_layers, self.alternate)

    def to_ledger(self) -> PrivacyLedger:
        """An empty ledger with this plan's accountant, adjacency and planned releases."""
        ledger = PrivacyLedger(accountant=self.accountant, adjacency=self.adjacency)
        for r in self.planned_runs():
            ledger.add_planned(r.sample_rate, r.noise_multiplier, r.count, r.label)
        return ledger

    def to_dict(self) -> dict:
        """The plan's fields, the sigmas as ``sigma_shared`` and ``sigma_expert`` (None: not released)."""
        d = {}
        for f in fields(self):
            if f.name == "sigmas":
                d.update(sigma_shared=self.sigma_shared, sigma_expert=self.sigma_expert)
            else:
                d[f.name] = getattr(self, f.name)
        d["streams"] = list(self.streams)
        d["alternate"] = list(self.alternate) if self.alternate is not None else None
        d["planned_runs"] = [r.to_dict() for r in self.planned_runs()]
        return d


def _planned_runs(q: float, steps: int, sigma_s: float | None, sigma_e: float | None, num_layers: int,
                  alternate: tuple[int, int] | None) -> tuple[EventRun, ...]:
    if alternate is not None:
        n_shared, n_expert = phase_counts(steps, alternate)
        runs = []
        if n_shared:
            runs.append(EventRun(q, step_noise_multiplier("shared", sigma_s, sigma_e, num_layers), n_shared,
                                 "shared"))
        if n_expert:
            runs.append(EventRun(q, step_noise_multiplier("expert", sigma_s, sigma_e, num_layers), n_expert,
                                 "expert"))
        return tuple(runs)
    if sigma_s is not None and sigma_e is not None:
        phase = "joint"
    else:
        phase = "shared" if sigma_s is not None else "expert"
    return (EventRun(q, step_noise_multiplier(phase, sigma_s, sigma_e, num_layers), steps, phase),)


def _sigmas(m: float, streams: tuple[str, ...], shared_ratio: float, num_layers: int
            ) -> tuple[float | None, float | None]:
    if len(streams) == 2:
        return split_noise_multiplier(m, shared_ratio, num_layers)
    if streams == ("shared",):
        return m, None
    return None, m * math.sqrt(num_layers)


def _is_rdp_order_warning(record: logging.LogRecord) -> bool:
    return "failed to converge" in record.getMessage()


#: Drops dp_accounting's "excluding this order" warnings while RDP only provides a warm start, in
#: the calibrating thread only (another thread's accounting keeps its warnings).
#: At small noise some fractional RDP orders do not converge and are left out of the minimum;
#: the RDP bound stays valid, and here it only seeds the PLD search, so the warning is noise.
_quiet_rdp_orders = ScopedDrop("absl", _is_rdp_order_warning)


class _TooTight(Exception):
    def __init__(self, m: float, eps: float) -> None:
        self.m, self.eps = m, eps


class _TooLoose(Exception):
    def __init__(self, m: float, eps: float) -> None:
        self.m, self.eps = m, eps


def _search(f: Callable[[float], float], target: float, start: float, factor: float, rtol: float,
            max_evals: int | None) -> tuple[float, float]:
    """Return (m, f(m)) with f(m) <= target, m in [SIGMA_MIN, SIGMA_MAX], f decreasing in m.

    Stops when target * (1 - rtol) <= f(m), the bracket is below 1e-6 in log m, or max_evals is
    reached; raises _TooTight / _TooLoose when the target is outside [f(SIGMA_MAX), f(SIGMA_MIN)].
    """
    evals = 0

    def ev(m: float) -> float:
        nonlocal evals
        evals += 1
        return f(m)

    def done(fm: float) -> bool:
        return fm >= target * (1.0 - rtol) or (max_evals is not None and evals >= max_evals)

    m = min(max(start, SIGMA_MIN), SIGMA_MAX)
    fm = ev(m)
    if fm > target:
        lo, f_lo = m, fm
        while True:
            if lo >= SIGMA_MAX:
                raise _TooTight(lo, f_lo)
            m = min(lo * factor, SIGMA_MAX)
            fm = ev(m)
            if fm <= target:
                hi, f_hi = m, fm
                break
            lo, f_lo = m, fm
    else:
        hi, f_hi = m, fm
        while True:
            if done(f_hi):
                return hi, f_hi
            if hi <= SIGMA_MIN:
                raise _TooLoose(hi, f_hi)
            m = max(hi / factor, SIGMA_MIN)
            fm = ev(m)
            if fm > target:
                lo, f_lo = m, fm
                break
            hi, f_hi = m, fm
    # Illinois iteration on x = log m, y = log f - log target; y(lo) > 0 >= y(hi).
    x_lo, x_hi = math.log(lo), math.log(hi)
    y_lo = math.log(f_lo) - math.log(target) if math.isfinite(f_lo) else math.inf
    y_hi = math.log(max(f_hi, 1e-300)) - math.log(target)
    side = 0
    while not done(f_hi) and x_hi - x_lo > 1e-6:
        width = x_hi - x_lo
        if math.isfinite(y_lo):
            x = x_hi - y_hi * (x_hi - x_lo) / (y_hi - y_lo)
            x = min(max(x, x_lo + 0.02 * width), x_hi - 0.02 * width)
        else:  # an infinite epsilon at the low end: bisect
            x = x_lo + 0.5 * width
        fm = ev(math.exp(x))
        y = math.log(max(fm, 1e-300)) - math.log(target)
        if fm <= target:
            x_hi, y_hi, f_hi = x, y, fm
            if side == 1:
                y_lo /= 2.0
            side = 1
        else:
            x_lo, y_lo = x, y
            if side == -1:
                y_hi /= 2.0
            side = -1
    return math.exp(x_hi), f_hi


def plan_budget(*, dataset_size: int, batch_size: int, epsilon: float, delta: float | None = None,
                epochs: float | None = None, steps: int | None = None, num_layers: int = 1,
                shared_ratio: float = 0.5, alternate: tuple[int, int] | None = None,
                streams: tuple[str, ...] = ("shared", "expert"), adjacency: str = "add-remove",
                accountant: str = "pld") -> BudgetPlan:
    """Calibrate sigma_s and sigma_e for a whole run; see the module docstring for the rules.

    One pass: the inputs are checked, the one noise scale m is calibrated, and each m the search
    tries is split into the streams' sigmas once (:func:`_releases_at`); the plan keeps the split
    and the epsilon of the m it ends at.
    """
    q, total_steps = _check_length(dataset_size, batch_size, epochs, steps, epsilon, accountant, adjacency)
    target = float(epsilon)
    delta_value, delta_is_default = _check_delta(delta, dataset_size)
    streams, alternate, ratio = _check_streams(streams, num_layers, alternate, shared_ratio)
    releases_at = _releases_at(q, total_steps, streams, ratio, num_layers, alternate)

    def epsilon_at(m: float, vdi: float, kind: str = accountant, relation: str = adjacency) -> float:
        return epsilon_of(canonical_counts(releases_at(m)[2]), delta_value, accountant=kind,
                          adjacency=relation, value_discretization_interval=vdi)

    what = (f"q={q:.4g} (B={batch_size}, N={dataset_size}), T={total_steps} steps, delta={delta_value:.3g}, "
            f"{adjacency}, accountant={accountant}")
    m, reached = _calibrate(epsilon_at, target, accountant, what)
    sigma_s, sigma_e, _ = releases_at(m)
    if reached > target:  # unreachable by construction; never return a plan over budget
        raise InfeasibleTargetError(f"calibration ended at epsilon={reached} > target {target}; please report.")
    return BudgetPlan(
        dataset_size=dataset_size, batch_size=batch_size, sample_rate=q, steps=total_steps,
        epochs=None if epochs is None else float(epochs), num_layers=num_layers, streams=streams,
        shared_ratio=ratio, alternate=alternate, sigmas={"shared": sigma_s, "expert": sigma_e},
        sigma_eff=joint_noise_multiplier(sigma_s, sigma_e, num_layers), epsilon=reached, delta=delta_value,
        delta_is_default=delta_is_default, target_epsilon=target, adjacency=adjacency, accountant=accountant,
        value_discretization_interval=VALUE_DISCRETIZATION_INTERVAL if accountant == "pld" else None,
    )


def _check_length(dataset_size: int, batch_size: int, epochs: float | None, steps: int | None, epsilon: float,
                  accountant: str, adjacency: str) -> tuple[float, int]:
    """(q, T) of a plan, after checking N, B, epsilon, the accountant, the adjacency and the run's length."""
    check_count(dataset_size, "dataset_size")
    check_count(batch_size, "batch_size")
    if batch_size > dataset_size:
        raise ConfigError(f"batch_size={batch_size} exceeds dataset_size={dataset_size}: the sample rate "
                          "q = B/N must be at most 1. Lower the batch size.")
    q = check_sample_rate(batch_size / dataset_size)
    check_epsilon(epsilon)
    check_accountant(accountant)
    check_adjacency(adjacency)
    if (epochs is None) == (steps is None):
        raise ConfigError(f"give exactly one of epochs={epochs!r} and steps={steps!r}.")
    steps_per_epoch = math.ceil(dataset_size / batch_size)
    if epochs is not None:
        if isinstance(epochs, bool) or not isinstance(epochs, (int, float)) or not math.isfinite(epochs) \
                or epochs <= 0:
            raise ConfigError(f"epochs={epochs!r} must be a number > 0.")
        total_steps = math.ceil(steps_per_epoch * epochs - 1e-9)
    else:
        total_steps = check_count(steps, "steps")
    check_steps(total_steps, f"--epochs {epochs:g} of N={dataset_size} records at B={batch_size}"
                if epochs is not None else f"--steps {steps}")
    return q, total_steps


def _check_delta(delta: float | None, dataset_size: int) -> tuple[float, bool]:
    """(delta, whether it is the default): a given delta must be below 1/N."""
    if delta is None:
        return default_delta(dataset_size), True
    delta_value = check_delta(delta)
    if delta_value >= 1.0 / dataset_size:
        raise ConfigError(f"delta={delta_value:g} is not below 1/N = {1.0 / dataset_size:.3g} for N="
                          f"{dataset_size} records: such a delta allows publishing a record outright. Use "
                          f"a smaller delta, or leave it unset for the default {default_delta(dataset_size):g}.")
    return delta_value, False


def _check_streams(streams: tuple[str, ...], num_layers: int, alternate: tuple[int, int] | None,
                   shared_ratio: float) -> tuple[tuple[str, ...], tuple[int, int] | None, float | None]:
    """(streams in STREAMS order, the checked schedule, r or None when one stream only is released)."""
    streams = tuple(streams)
    if not streams or len(set(streams)) != len(streams) or any(s not in STREAMS for s in streams):
        raise ConfigError(f"streams={streams!r} must be a non-empty subset of {STREAMS}, without repeats.")
    streams = tuple(s for s in STREAMS if s in streams)
    check_count(num_layers, "num_layers", minimum=1 if "expert" in streams else 0)
    alternate = check_alternate(alternate)
    if alternate is not None and len(streams) != 2:
        raise ConfigError(f"alternate={alternate} needs both streams, got streams={streams}.")
    ratio = check_shared_ratio(shared_ratio) if len(streams) == 2 else None
    return streams, alternate, ratio


def _releases_at(q: float, steps: int, streams: tuple[str, ...], ratio: float | None, num_layers: int,
                 alternate: tuple[int, int] | None
                 ) -> Callable[[float], tuple[float | None, float | None, tuple[EventRun, ...]]]:
    """m -> (sigma_s, sigma_e, the planned releases): the one place a noise scale m is split into the
    streams' sigmas, once per m (the search's calibration and the plan share each split)."""
    split: dict[float, tuple[float | None, float | None, tuple[EventRun, ...]]] = {}

    def at(m: float) -> tuple[float | None, float | None, tuple[EventRun, ...]]:
        if m not in split:
            sigma_s, sigma_e = _sigmas(m, streams, ratio or 0.5, num_layers)
            split[m] = (sigma_s, sigma_e, _planned_runs(q, steps, sigma_s, sigma_e, num_layers, alternate))
        return split[m]

    return at


def _calibrate(epsilon_at: Callable[..., float], target: float, accountant: str, what: str) -> tuple[float, float]:
    """(m, epsilon at m) by the stages of the module docstring's "Calibration"; the epsilon is the
    primary accountant's at the reported discretisation, as the ledger computes it.

    ``epsilon_at(m, vdi, kind, relation)`` is epsilon at noise scale m (``kind`` and ``relation``
    default to the plan's accountant and adjacency); ``what`` describes the run in the errors.
    """

    def at(vdi: float, kind: str | None = None, relation: str | None = None) -> Callable[[float], float]:
        extra = {} if kind is None else {"kind": kind, "relation": relation}
        return lambda m: epsilon_at(m, vdi, **extra)

    try:
        if accountant == "pld":
            # warm start only (no bound is taken from it): add/remove RDP is a little looser than the
            # PLD answer for add/remove and close to it for replace-one (whose own RDP route is ~2x loose)
            with _quiet_rdp_orders():
                try:
                    m_rdp, _ = _search(at(VALUE_DISCRETIZATION_INTERVAL, "rdp", "add-remove"), target, 1.0, 2.0,
                                       WARM_START_RTOL, None)
                except (_TooTight, _TooLoose) as edge:  # let the primary accountant decide feasibility
                    m_rdp = edge.m
            try:
                m, _ = _search(at(COARSE_DISCRETIZATION_INTERVAL), target, m_rdp, 1.1, COARSE_RTOL, None)
            except _TooTight as tight:  # the coarse grid is loose at tiny epsilon: let the fine grid decide
                m = tight.m
            try:
                return _search(at(VALUE_DISCRETIZATION_INTERVAL), target, m, 1.02, FINE_RTOL, MAX_FINE_EVALUATIONS)
            except _TooLoose as loose:  # the fine grid allows even less noise than SIGMA_MIN: keep SIGMA_MIN
                return loose.m, loose.eps
        return _search(at(VALUE_DISCRETIZATION_INTERVAL), target, 1.0, 2.0, RDP_RTOL, None)
    except _TooTight as err:
        raise InfeasibleTargetError(
            f"epsilon={target:g} is out of reach: even a step noise multiplier sigma_eff={err.m:g} (the "
            f"largest this planner tries) spends epsilon={err.eps:.4g} with {what}. Raise epsilon, or lower the number of steps or "
            "the batch size."
        ) from None
    except _TooLoose as err:
        raise InfeasibleTargetError(
            f"epsilon={target:g} is so loose that a step noise multiplier sigma_eff={err.m:g} (the smallest this "
            f"planner tries) already meets it (epsilon={err.eps:.4g}) with {what}; less noise gives essentially no privacy. "
            "Lower epsilon (typical budgets are 1 to 10), or train without DP."
        ) from None
