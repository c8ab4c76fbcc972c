"""Epsilon lower bounds: Clopper-Pearson threshold tests and the one-run bound of Steinke et al. (2023)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats

from raptor.accounting.accountants import epsilon_of
from raptor.audit.bounds import (
    clopper_pearson_interval,
    clopper_pearson_upper,
    epsilon_at_threshold,
    one_run_epsilon,
    one_run_p_value,
    roc_hull,
    threshold_audit,
)
from raptor.errors import ConfigError


def _deterministic_normal(mu: float, n: int) -> np.ndarray:
    """n scores at the mid-quantiles of N(mu, 1) (the construction of jax_privacy's test)."""
    return scipy.stats.norm.ppf(np.linspace(0.0, 1.0, n, endpoint=False) + 1.0 / (2 * n)) + mu


@pytest.mark.parametrize(("shift", "expected"), [(1, 1.13346), (2, 2.311945), (4, 4.395568)])
def test_one_run_matches_jax_privacy_published_values(shift, expected):
    # jax_privacy tests/auditing_test.py::test_epsilon_one_run_close: 10,000 in ~ N(shift, 1),
    # 10,000 out ~ N(0, 1), significance 0.05, delta 1e-6.
    bound = one_run_epsilon(_deterministic_normal(shift, 10_000), _deterministic_normal(0, 10_000),
                            significance=0.05, delta=1e-6)
    assert bound.epsilon == pytest.approx(expected, rel=1e-5)
    assert bound.m == 20_000 and 0 < bound.n_correct <= bound.n_guess


def test_one_run_p_value_matches_a_naive_sum():
    q = 1 / (1 + math.exp(-0.7))
    for m, r, v, delta in [(100, 30, 25, 1e-3), (1000, 100, 70, 0.0), (50, 10, 10, 1e-2)]:
        beta = scipy.stats.binom.sf(v - 1, r, q)
        alpha, acc = 0.0, 0.0
        for i in range(1, v + 1):
            acc += scipy.stats.binom.pmf(v - i, r, q)
            alpha = max(alpha, acc / i)
        assert one_run_p_value(m, r, v, 0.7, delta) == pytest.approx(min(beta + alpha * delta * 2 * m, 1), rel=1e-9)


def test_one_run_gives_zero_without_signal():
    rng = np.random.default_rng(0)
    assert one_run_epsilon(rng.normal(size=500), rng.normal(size=500), delta=1e-5).epsilon < 0.2


def test_roc_hull_keeps_only_extreme_points():
    thresholds, tp, fp = roc_hull(np.array([1.5, 2.5, 0.5, 3.5]), np.array([0.0, 3.0, 2.0, 1.0]))
    assert list(thresholds) == [0.0, 0.5, 3.5, np.inf]
    assert list(tp) == [4, 4, 1, 0] and list(fp) == [4, 3, 0, 0]


def test_clopper_pearson_covers_at_the_stated_level():
    rng = np.random.default_rng(1)
    n, p, sig = 200, 0.3, 0.1
    k = rng.binomial(n, p, size=20_000)
    assert abs(np.mean(clopper_pearson_upper(k, n, sig) < p) - sig) < 0.02  # misses ~ at most sig
    lo, hi = clopper_pearson_interval(60, 200, 0.95)
    assert lo < 0.3 < hi and clopper_pearson_upper(200, 200, 0.05) == 1.0


def test_threshold_bound_is_the_clopper_pearson_formula():
    ins, outs = _deterministic_normal(1.0, 1000), _deterministic_normal(0.0, 1000)
    b = epsilon_at_threshold(ins, outs, 1.5, delta=0.0, significance=0.1)
    fn, fp = int(np.sum(ins < 1.5)), int(np.sum(outs >= 1.5))
    a_ub, b_ub = clopper_pearson_upper(fp, 1000, 0.05), clopper_pearson_upper(fn, 1000, 0.05)
    assert b.epsilon == pytest.approx(max(math.log((1 - b_ub) / a_ub), math.log((1 - a_ub) / b_ub), 0.0))


@pytest.mark.parametrize(("mu", "tight"), [(0.5, 0.75), (1.0, 0.75), (2.0, 0.7)])
def test_threshold_audit_of_a_gaussian_is_valid_and_tight(mu, tight):
    # mu = 2 (claim 6.0): the optimal test has ~1e-3 false positives, and the threshold must keep
    # >= 30 of 25,000 (bounds.MIN_ERRORS): 0.73 of the claim instead of 0.76, for a stable bound.
    delta = 1e-2
    claim = epsilon_of((((1.0, 1.0 / mu), 1),), delta)  # the Gaussian mechanism, sensitivity 1, sigma 1/mu
    halves = [_deterministic_normal(mu, 50_000), _deterministic_normal(0.0, 50_000)]
    fit = [h[0::2] for h in halves]
    ev = [h[1::2] for h in halves]
    b = threshold_audit(fit[0], fit[1], ev[0], ev[1], delta=delta, significance=0.05)
    assert tight * claim < b.epsilon <= claim


def test_bad_arguments_name_the_problem():
    with pytest.raises(ConfigError, match="significance"):
        epsilon_at_threshold([1.0], [0.0], 0.5, delta=0.0, significance=0.7)
    with pytest.raises(ConfigError, match="finite"):
        one_run_epsilon([np.nan], [0.0], delta=1e-5)


def test_chosen_threshold_has_enough_errors_to_be_stable():
    # Issue 24: a threshold with 1 false positive in 20,000 on the fitting half is a lottery ticket.
    from raptor.audit.bounds import MIN_ERRORS, _counts_at, best_threshold

    rng = np.random.default_rng(3)
    ins, outs = rng.normal(2.0, 1.0, 20_000), rng.normal(0.0, 1.0, 20_000)
    t_old = best_threshold(ins, outs, delta=1e-2, min_errors=0)
    t_new = best_threshold(ins, outs, delta=1e-2)
    fn, fp = _counts_at(ins, outs, np.array([t_new]))
    assert max(int(fp[0]), int(fn[0])) >= MIN_ERRORS
    assert int(_counts_at(ins, outs, np.array([t_old]))[1][0]) < MIN_ERRORS  # the old rule did pick a rare count
    with pytest.raises(ConfigError, match="min_errors"):
        best_threshold(ins, outs, delta=1e-2, min_errors=-1)
