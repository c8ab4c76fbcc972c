"""raptor.accounting: DP accounting of RAPTOR's releases, built on Google's ``dp_accounting``.

* :mod:`~raptor.accounting.events`: a release as a ``dp_accounting`` event; range checks.
* :mod:`~raptor.accounting.accountants`: epsilon/delta with PLD (primary, discretisation 2e-4) or RDP.
* :mod:`~raptor.accounting.rules`: the joint-step and alternating-schedule rules.
* :mod:`~raptor.accounting.ledger`: :class:`PrivacyLedger`, saved with every checkpoint.
* :mod:`~raptor.accounting.planning`: :func:`plan_budget` -> :class:`BudgetPlan` (calibration).

This package imports no torch (tested).
"""

from raptor.accounting.accountants import (
    COARSE_DISCRETIZATION_INTERVAL,
    VALUE_DISCRETIZATION_INTERVAL,
    delta_of,
    epsilon_of,
)
from raptor.accounting.events import EventRun, canonical_counts, composed_event, subsampled_gaussian_event
from raptor.accounting.ledger import PrivacyLedger
from raptor.accounting.planning import SIGMA_MAX, SIGMA_MIN, BudgetPlan, default_delta, plan_budget
from raptor.accounting.rules import (
    alternating_phase,
    joint_noise_multiplier,
    phase_counts,
    split_noise_multiplier,
    step_noise_multiplier,
)

__all__ = [
    "COARSE_DISCRETIZATION_INTERVAL",
    "VALUE_DISCRETIZATION_INTERVAL",
    "SIGMA_MAX",
    "SIGMA_MIN",
    "BudgetPlan",
    "EventRun",
    "PrivacyLedger",
    "alternating_phase",
    "canonical_counts",
    "composed_event",
    "default_delta",
    "delta_of",
    "epsilon_of",
    "joint_noise_multiplier",
    "phase_counts",
    "plan_budget",
    "split_noise_multiplier",
    "step_noise_multiplier",
    "subsampled_gaussian_event",
]
