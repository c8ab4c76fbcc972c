"""DP events: the one kind of release raptor makes, described as ``dp_accounting`` events.

Every release raptor makes in one update is a Poisson-subsampled Gaussian mechanism: a Poisson
sample with rate q, per-record contributions clipped to norm C, a sum, and Gaussian noise of
standard deviation sigma * C on every coordinate. In ``dp_accounting`` terms one update is

    PoissonSampledDpEvent(q, GaussianDpEvent(sigma))

and T identical updates are ``SelfComposedDpEvent(that, T)``. Phases with different (q, sigma)
are composed one after another with ``ComposedDpEvent``. :class:`EventRun` is the small, JSON-safe
record of such a run of identical updates that the ledger and the planner keep.

This module also holds the range checks shared by the whole package: every value that reaches an
accountant was checked here first, and a bad one raises :class:`~raptor.errors.ConfigError` naming
the value and what to do.

Privacy: describing a release is free; only the (q, sigma, count) of the release enter the
accounting, never a statistic of the private data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # imported where used: ``raptor --help`` and argument errors need no dp_accounting
    import dp_accounting

from raptor.errors import ConfigError

Accountant = Literal["pld", "rdp"]
Adjacency = Literal["add-remove", "replace-one"]

ACCOUNTANTS: tuple[str, ...] = ("pld", "rdp")
ADJACENCIES: tuple[str, ...] = ("add-remove", "replace-one")


def check_sample_rate(q: float, name: str = "sample_rate") -> float:
    """Return q as a float if 0 < q <= 1, else raise ConfigError."""
    if isinstance(q, bool) or not isinstance(q, (int, float)) or not math.isfinite(q) or not 0.0 < q <= 1.0:
        raise ConfigError(
            f"{name}={q!r} is outside (0, 1]: the Poisson sampling rate q = B/N must be positive and at "
            "most 1; check the batch size and the dataset size."
        )
    return float(q)


def check_noise_multiplier(sigma: float, name: str = "noise_multiplier") -> float:
    """Return sigma as a float if it is finite and > 0, else raise ConfigError."""
    if isinstance(sigma, bool) or not isinstance(sigma, (int, float)) or not math.isfinite(sigma) or sigma <= 0:
        raise ConfigError(
            f"{name}={sigma!r} must be a finite number > 0: a release without noise is not private. "
            "Pass the noise multiplier (noise std / clip norm) of the release."
        )
    return float(sigma)


def check_delta(delta: float, name: str = "delta") -> float:
    """Return delta as a float if 0 < delta < 1, else raise ConfigError."""
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0.0 < delta < 1.0:
        raise ConfigError(
            f"{name}={delta!r} is outside (0, 1); use a delta well below 1/N for N training records "
            "(e.g. 1e-5 or 1e-6)."
        )
    return float(delta)


def check_epsilon(epsilon: float, name: str = "epsilon") -> float:
    """Return epsilon as a float if it is finite and > 0, else raise ConfigError."""
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not math.isfinite(epsilon) \
            or epsilon <= 0:
        raise ConfigError(f"{name}={epsilon!r} must be a finite number > 0 (typical budgets are 1 to 10).")
    return float(epsilon)


def check_count(count: int, name: str = "count", minimum: int = 1) -> int:
    """Return count if it is an int >= minimum, else raise ConfigError."""
    if isinstance(count, bool) or not isinstance(count, int) or count < minimum:
        raise ConfigError(f"{name}={count!r} must be an integer >= {minimum}.")
    return count


#: the most releases (steps) raptor accounts for: composing T releases costs time that grows with T
#: (PLD self-composition: about 4 s at 1e6, over 40 s at 1e8; beyond, minutes to hours and
#: terabytes), so a larger T is refused up front instead of hanging
MAX_STEPS: int = 1_000_000


def check_steps(count: int, what: str = "steps") -> int:
    """Return count if it is at most :data:`MAX_STEPS`, else a :class:`ConfigError` naming ``what``."""
    if count > MAX_STEPS:
        raise ConfigError(f"{what} gives {count:,} steps, more than the {MAX_STEPS:,} steps raptor accounts for "
                          "(the accountant's cost grows with the number of steps); lower --steps or --epochs, or "
                          "raise --batch-size")
    return count


def check_accountant(accountant: str) -> str:
    if accountant not in ACCOUNTANTS:
        raise ConfigError(f"accountant={accountant!r} is not one of {list(ACCOUNTANTS)}; use 'pld' (primary) "
                          "or 'rdp' (cross-check).")
    return accountant


def check_adjacency(adjacency: str) -> str:
    if adjacency not in ADJACENCIES:
        raise ConfigError(f"adjacency={adjacency!r} is not one of {list(ADJACENCIES)}.")
    return adjacency


@dataclass(frozen=True)
class EventRun:
    """``count`` consecutive identical releases: Poisson rate q, Gaussian noise multiplier sigma.

    ``label`` ("joint", "shared", "expert", ...) is descriptive only; it does not enter the
    accounting. Two runs with the same (q, sigma) are the same mechanism whatever their labels.
    """

    sample_rate: float
    noise_multiplier: float
    count: int
    label: str = "joint"

    def __post_init__(self) -> None:
        object.__setattr__(self, "sample_rate", check_sample_rate(self.sample_rate))
        object.__setattr__(self, "noise_multiplier", check_noise_multiplier(self.noise_multiplier))
        check_count(self.count)
        check_steps(self.count, f"count={self.count}")
        if not isinstance(self.label, str) or not self.label:
            raise ConfigError(f"label={self.label!r} must be a non-empty string.")

    @property
    def key(self) -> tuple[float, float]:
        """The mechanism, (q, sigma): what the accountant sees."""
        return (self.sample_rate, self.noise_multiplier)

    def to_dp_event(self) -> dp_accounting.DpEvent:
        """``SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(sigma)), count)``."""
        return subsampled_gaussian_event(self.sample_rate, self.noise_multiplier, self.count)

    def to_dict(self) -> dict:
        return {"sample_rate": self.sample_rate, "noise_multiplier": self.noise_multiplier,
                "count": self.count, "label": self.label}

    @classmethod
    def from_dict(cls, d: dict) -> EventRun:
        try:
            return cls(d["sample_rate"], d["noise_multiplier"], d["count"], d.get("label", "joint"))
        except (KeyError, TypeError) as err:
            raise ConfigError(f"malformed event run {d!r}: needs sample_rate, noise_multiplier, count "
                              f"({err})") from err


def subsampled_gaussian_event(sample_rate: float, noise_multiplier: float, count: int = 1) -> dp_accounting.DpEvent:
    """T = ``count`` Poisson-subsampled Gaussian releases as one ``dp_accounting`` event."""
    q = check_sample_rate(sample_rate)
    sigma = check_noise_multiplier(noise_multiplier)
    check_count(count)
    import dp_accounting

    one = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma))
    return dp_accounting.SelfComposedDpEvent(one, count)


def composed_event(runs: list[EventRun] | tuple[EventRun, ...]) -> dp_accounting.DpEvent:
    """Heterogeneous phases composed one after another: ``ComposedDpEvent`` of the runs, in order."""
    import dp_accounting

    return dp_accounting.ComposedDpEvent([r.to_dp_event() for r in runs])


def canonical_counts(runs) -> tuple[tuple[tuple[float, float], int], ...]:
    """The multiset of mechanisms in ``runs``: ((q, sigma), total count) sorted by (q, sigma).

    Composition of DP mechanisms is commutative (the privacy loss of a composition is the sum of
    independent privacy losses), so any two sequences of releases with the same multiset have the
    same guarantee. Evaluating on this canonical form makes the ledger's answer independent of
    the order and the run-length grouping of its records, and equal, bit for bit, to the
    planner's answer for the same planned releases.
    """
    totals: dict[tuple[float, float], int] = {}
    for r in runs:
        totals[r.key] = totals.get(r.key, 0) + r.count
    return tuple(sorted(totals.items()))
