"""The privacy ledger: every executed (and, optionally, every planned) release of a run.

Each entry is a run of identical Poisson-subsampled Gaussian releases (:class:`EventRun`);
recording one more identical release only increments the last run's count, so ``record`` is O(1)
however long the training. Queries evaluate the composition of all runs with the chosen
accountant (:mod:`raptor.accounting.accountants`) and are cached on the multiset of mechanisms,
so a progress bar that asks for epsilon every few steps pays one PLD self-composition per query.

``check_can_record`` is the dry run the trainer performs before every update: it raises
:class:`~raptor.errors.BudgetExceededError`, and changes nothing, if the ledger plus the requested
releases would exceed (epsilon_budget, delta). When the request stays inside the planned
releases and the plan itself is within the budget, no computation is needed: the output of a
sub-multiset of the planned releases is a post-processing (a marginal) of the output of all
planned releases, so its true epsilon is at most the plan's, and the plan's verified upper bound
covers it.

The ledger is saved with every checkpoint (``to_dict`` -> JSON) and a resumed run continues it
(``from_dict``).

Privacy: the ledger holds (q, sigma, count, label) only, never a statistic of the private data.
"""

from __future__ import annotations

from collections.abc import Iterable

import dp_accounting

from raptor.accounting.accountants import VALUE_DISCRETIZATION_INTERVAL, delta_of, epsilon_of
from raptor.accounting.events import (
    EventRun,
    canonical_counts,
    check_accountant,
    check_adjacency,
    check_count,
    check_delta,
    check_epsilon,
    check_noise_multiplier,
    check_sample_rate,
    composed_event,
)
from raptor.errors import BudgetExceededError, ConfigError

LEDGER_FORMAT = "raptor.privacy_ledger/1"


def _contains(multiset: dict[tuple[float, float], int], sub: dict[tuple[float, float], int]) -> bool:
    """Whether ``sub`` is a sub-multiset of ``multiset`` (every count at most the other's)."""
    return all(multiset.get(key, 0) >= n for key, n in sub.items())


class PrivacyLedger:
    """Executed and planned DP releases with their (epsilon, delta) guarantee.

    Args:
        accountant: ``"pld"`` (primary; PLD with value_discretization_interval 2e-4) or ``"rdp"``.
        adjacency: ``"add-remove"`` or ``"replace-one"`` (see :mod:`raptor.accounting.accountants`).
    """

    def __init__(self, accountant: str = "pld", adjacency: str = "add-remove") -> None:
        self.accountant = check_accountant(accountant)
        self.adjacency = check_adjacency(adjacency)
        self._executed: list[EventRun] = []
        self._planned: list[EventRun] = []
        self._executed_totals: dict[tuple[float, float], int] = {}
        self._steps = 0
        # (multiset, budget, delta) whose epsilon at delta was verified <= budget; see check_can_record
        self._verified: list[tuple[dict[tuple[float, float], int], float, float]] = []
        self._ahead = 8

    # ----------------------------------------------------------------------------- recording
    def record(self, sample_rate: float, noise_multiplier: float, count: int = 1, label: str = "joint") -> None:
        """Append ``count`` executed releases (q, sigma). O(1): identical consecutive runs merge."""
        q = check_sample_rate(sample_rate)
        sigma = check_noise_multiplier(noise_multiplier)
        check_count(count)
        last = self._executed[-1] if self._executed else None
        if last is not None and last.key == (q, sigma) and last.label == label:
            self._executed[-1] = EventRun(q, sigma, last.count + count, label)
        else:
            self._executed.append(EventRun(q, sigma, count, label))
        self._executed_totals[(q, sigma)] = self._executed_totals.get((q, sigma), 0) + count
        self._steps += count

    def add_planned(self, sample_rate: float, noise_multiplier: float, count: int = 1,
                    label: str = "joint") -> None:
        """Append ``count`` planned releases (they are not executed; see ``epsilon(planned=True)``)."""
        run = EventRun(sample_rate, noise_multiplier, count, label)
        last = self._planned[-1] if self._planned else None
        if last is not None and last.key == run.key and last.label == run.label:
            self._planned[-1] = EventRun(run.sample_rate, run.noise_multiplier, last.count + count, label)
        else:
            self._planned.append(run)

    # ----------------------------------------------------------------------------- views
    def __len__(self) -> int:
        """Number of executed releases (steps) recorded."""
        return self._steps

    @property
    def executed(self) -> tuple[EventRun, ...]:
        return tuple(self._executed)

    @property
    def planned(self) -> tuple[EventRun, ...]:
        return tuple(self._planned)

    def dp_event(self, planned: bool = False) -> dp_accounting.DpEvent:
        """The executed (or planned) releases as one ``dp_accounting`` ``ComposedDpEvent``, in order."""
        return composed_event(self._planned if planned else self._executed)

    def _counts(self, planned: bool):
        if planned:
            return canonical_counts(self._planned)
        return tuple(sorted(self._executed_totals.items()))

    # ----------------------------------------------------------------------------- queries
    def epsilon(self, delta: float, *, planned: bool = False) -> float:
        """Epsilon at ``delta`` of everything executed (or everything planned). 0 if nothing."""
        return epsilon_of(self._counts(planned), check_delta(delta), accountant=self.accountant,
                          adjacency=self.adjacency)

    def delta(self, epsilon: float, *, planned: bool = False) -> float:
        """Delta at ``epsilon`` of everything executed (or everything planned). 0 if nothing."""
        return delta_of(self._counts(planned), epsilon, accountant=self.accountant, adjacency=self.adjacency)

    def check_can_record(self, sample_rate: float, noise_multiplier: float, count: int,
                         epsilon_budget: float, delta: float) -> None:
        """Raise BudgetExceededError if recording these releases would exceed (epsilon_budget, delta).

        A dry run: the ledger is not changed either way. Cheap when called before every step:

        * a request inside a verified multiset (the plan, or an earlier look-ahead) whose epsilon
          at a delta <= ``delta`` was <= a budget <= ``epsilon_budget`` needs no computation
          (sub-multiset argument in the module docstring; epsilon only falls as delta grows);
        * otherwise we first try to verify a look-ahead (the request plus ``_ahead`` more of the
          same release; ``_ahead`` starts at 8 and doubles on success); if it fits, it is
          remembered and the following checks are free; if not, ``_ahead`` halves and the exact
          request decides. A run of T identical steps costs O(log T) evaluations.
        """
        q = check_sample_rate(sample_rate)
        sigma = check_noise_multiplier(noise_multiplier)
        check_count(count)
        budget = check_epsilon(epsilon_budget, "epsilon_budget")
        check_delta(delta)
        key = (q, sigma)
        totals = dict(self._executed_totals)
        totals[key] = totals.get(key, 0) + count
        if self._covered(totals, budget, delta):
            return
        if self._planned:
            planned = dict(canonical_counts(self._planned))
            if _contains(planned, totals) and self.epsilon(delta, planned=True) <= budget:
                self._remember(planned, budget, delta)
                return
        if self._ahead > 0:
            ahead = dict(totals)
            ahead[key] += self._ahead
            if self._eps(ahead, delta) <= budget:
                self._remember(ahead, budget, delta)
                self._ahead *= 2
                return
            self._ahead //= 2
        requested = self._eps(totals, delta)
        if requested <= budget:
            return
        spent = self.epsilon(delta)
        raise BudgetExceededError(
            f"recording {count} more release(s) (q={q:.6g}, noise multiplier={sigma:.6g}) would spend "
            f"epsilon={requested:.4f} at delta={delta:.3g}, over the budget epsilon={budget:.4f}; already spent "
            f"epsilon={spent:.4f} over {self._steps} step(s). Stop here (the model so far is within budget), "
            "or re-plan with more noise, fewer steps or a larger budget."
        )

    def _eps(self, totals: dict[tuple[float, float], int], delta: float) -> float:
        return epsilon_of(tuple(sorted(totals.items())), delta, accountant=self.accountant,
                          adjacency=self.adjacency)

    def _covered(self, totals: dict[tuple[float, float], int], budget: float, delta: float) -> bool:
        return any(_contains(multiset, totals) and budget >= b and delta >= d for multiset, b, d in self._verified)

    def _remember(self, multiset: dict[tuple[float, float], int], budget: float, delta: float) -> None:
        self._verified.append((multiset, budget, delta))
        del self._verified[:-4]

    # ----------------------------------------------------------------------------- JSON
    def to_dict(self) -> dict:
        """JSON-safe state (floats round-trip exactly through ``json``)."""
        return {
            "format": LEDGER_FORMAT,
            "accountant": self.accountant,
            "adjacency": self.adjacency,
            "value_discretization_interval": VALUE_DISCRETIZATION_INTERVAL,
            "executed": [r.to_dict() for r in self._executed],
            "planned": [r.to_dict() for r in self._planned],
        }

    @classmethod
    def from_dict(cls, d: dict) -> PrivacyLedger:
        """Rebuild a ledger saved by :meth:`to_dict` (e.g. from a checkpoint).

        The stored ``value_discretization_interval`` is informational: queries always use this
        version's grid (any pessimistic grid gives a valid upper bound).
        """
        if not isinstance(d, dict) or d.get("format") != LEDGER_FORMAT:
            got = d.get("format") if isinstance(d, dict) else type(d).__name__
            raise ConfigError(f"not a privacy ledger: format={got!r}, expected {LEDGER_FORMAT!r}.")
        ledger = cls(accountant=d.get("accountant", "pld"), adjacency=d.get("adjacency", "add-remove"))
        for item in d.get("executed", []):
            run = EventRun.from_dict(item)
            ledger.record(run.sample_rate, run.noise_multiplier, run.count, run.label)
        for item in d.get("planned", []):
            run = EventRun.from_dict(item)
            ledger.add_planned(run.sample_rate, run.noise_multiplier, run.count, run.label)
        return ledger

    def extend(self, runs: Iterable[EventRun]) -> None:
        """Record several executed runs in order."""
        for r in runs:
            self.record(r.sample_rate, r.noise_multiplier, r.count, r.label)

    def __repr__(self) -> str:
        return (f"PrivacyLedger(accountant={self.accountant!r}, adjacency={self.adjacency!r}, "
                f"steps={self._steps}, runs={len(self._executed)}, planned_runs={len(self._planned)})")
