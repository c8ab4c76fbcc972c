"""raptor.accounting: DP accounting of RAPTOR's releases, built on Google's ``dp_accounting``.

* :mod:`~raptor.accounting.events`: a release as a ``dp_accounting`` event; range checks.
* :mod:`~raptor.accounting.accountants`: epsilon/delta with PLD (primary, discretisation 2e-4) or RDP.
* :mod:`~raptor.accounting.rules`: the joint-step and alternating-schedule rules.
* :mod:`~raptor.accounting.ledger`: :class:`PrivacyLedger`, saved with every checkpoint.
* :mod:`~raptor.accounting.planning`: :func:`plan_budget` -> :class:`BudgetPlan` (calibration).

This package imports no torch (tested).
"""
from raptor._lazy import lazy_exports

#: exported name -> the module that defines it (imported on first use: PEP 562, see
#: :mod:`raptor._lazy`; no name may equal a submodule's name)
_EXPORTS: dict[str, str] = {
    "COARSE_DISCRETIZATION_INTERVAL": "raptor.accounting.accountants",
    "VALUE_DISCRETIZATION_INTERVAL": "raptor.accounting.accountants",
    "delta_of": "raptor.accounting.accountants",
    "epsilon_of": "raptor.accounting.accountants",
    "EventRun": "raptor.accounting.events",
    "canonical_counts": "raptor.accounting.events",
    "composed_event": "raptor.accounting.events",
    "subsampled_gaussian_event": "raptor.accounting.events",
    "PrivacyLedger": "raptor.accounting.ledger",
    "SIGMA_MAX": "raptor.accounting.planning",
    "SIGMA_MIN": "raptor.accounting.planning",
    "BudgetPlan": "raptor.accounting.planning",
    "default_delta": "raptor.accounting.planning",
    "plan_budget": "raptor.accounting.planning",
    "alternating_phase": "raptor.accounting.rules",
    "joint_noise_multiplier": "raptor.accounting.rules",
    "phase_counts": "raptor.accounting.rules",
    "split_noise_multiplier": "raptor.accounting.rules",
    "step_noise_multiplier": "raptor.accounting.rules",
}

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


__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
