"""epsilon_of / delta_of against dp_accounting, Opacus (RDP and PRV) and the closed-form Gaussian."""

from __future__ import annotations

import math

import dp_accounting
import pytest
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import norm

from raptor.accounting import (
    COARSE_DISCRETIZATION_INTERVAL,
    VALUE_DISCRETIZATION_INTERVAL,
    delta_of,
    epsilon_of,
)
from raptor.errors import ConfigError

REPLACE = dp_accounting.NeighboringRelation.REPLACE_ONE


def _sg(q, sigma, steps):
    return dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps)


def analytic_gaussian_delta(eps: float, sigma: float, sensitivity: float = 1.0) -> float:
    """Exact delta(eps) of the Gaussian mechanism N(0, sigma^2) (Balle & Wang 2018, Thm 8)."""
    mu = sensitivity / sigma
    return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2)


def test_pld_equals_dp_accounting_pld_accountant_on_heterogeneous_phases():
    counts = (((0.01, 0.9), 120), ((0.02, 1.3), 80))
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=VALUE_DISCRETIZATION_INTERVAL)
    acc.compose(dp_accounting.ComposedDpEvent([_sg(0.01, 0.9, 120), _sg(0.02, 1.3, 80)]))
    assert epsilon_of(counts, 1e-5) == pytest.approx(acc.get_epsilon(1e-5), rel=1e-12)
    assert delta_of(counts, 2.0) == pytest.approx(acc.get_delta(2.0), rel=1e-9)


def test_rdp_equals_dp_accounting_rdp_accountant():
    counts = (((0.01, 0.9), 120), ((0.02, 1.3), 80))
    acc = rdp_privacy_accountant.RdpAccountant()
    acc.compose(dp_accounting.ComposedDpEvent([_sg(0.01, 0.9, 120), _sg(0.02, 1.3, 80)]))
    assert epsilon_of(counts, 1e-5, accountant="rdp") == pytest.approx(acc.get_epsilon(1e-5), rel=1e-12)
    assert delta_of(counts, 2.0, accountant="rdp") == pytest.approx(acc.get_delta(2.0), rel=1e-12)


def test_replace_one_pld_equals_dp_accounting_replace_one():
    acc = pld_privacy_accountant.PLDAccountant(REPLACE, value_discretization_interval=VALUE_DISCRETIZATION_INTERVAL)
    acc.compose(_sg(0.01, 1.0, 300))
    assert epsilon_of((((0.01, 1.0), 300),), 1e-5, adjacency="replace-one") == pytest.approx(
        acc.get_epsilon(1e-5), rel=1e-12)


@pytest.mark.parametrize("sigma,steps", [(1.0, 1), (4.0, 10)])
def test_q1_matches_closed_form_gaussian(sigma, steps):
    """q = 1: T Gaussian releases = one Gaussian with sigma/sqrt(T); PLD is a tight upper bound."""
    sigma_t = sigma / math.sqrt(steps)
    counts = (((1.0, sigma), steps),)
    for eps in (0.5, 1.0, 2.0):
        exact = analytic_gaussian_delta(eps, sigma_t)
        got = delta_of(counts, eps)
        assert exact <= got <= exact * 1.01 + 1e-12
    eps_pld = epsilon_of(counts, 1e-5)
    assert analytic_gaussian_delta(eps_pld, sigma_t) <= 1e-5 * (1 + 1e-6)
    assert analytic_gaussian_delta(eps_pld - 0.01, sigma_t) > 1e-5  # within 0.01 of the exact epsilon


def test_replace_one_at_q1_is_the_gaussian_with_doubled_sensitivity():
    sigma = 2.0
    for eps in (0.5, 1.5):
        exact = analytic_gaussian_delta(eps, sigma, sensitivity=2.0)
        got = delta_of((((1.0, sigma), 1),), eps, adjacency="replace-one")
        assert exact <= got <= exact * 1.01 + 1e-12
        got_rdp = delta_of((((1.0, sigma), 1),), eps, adjacency="replace-one", accountant="rdp")
        assert got_rdp >= exact


def test_replace_one_costs_more_than_add_remove_and_rdp_bounds_pld():
    counts = (((0.01, 1.0), 500),)
    add_remove = epsilon_of(counts, 1e-5)
    replace = epsilon_of(counts, 1e-5, adjacency="replace-one")
    replace_rdp = epsilon_of(counts, 1e-5, adjacency="replace-one", accountant="rdp")
    assert add_remove < replace < replace_rdp
    # the RDP route (weak triangle inequality) is a valid but looser bound: within 2x here
    assert replace_rdp < 2 * replace


OPACUS_SETTINGS = [  # q, sigma, T, delta
    (0.01, 0.7428, 1000, 1e-5),  # the joint example
    (1024 / 67349, 0.8, 198, 1e-6),  # SST-2-sized, B 1024, 3 epochs
    (256 / 50000, 1.1, 3000, 1e-5),
    (0.1, 2.0, 100, 1e-5),
]


@pytest.mark.parametrize("q,sigma,steps,delta", OPACUS_SETTINGS)
def test_agrees_with_opacus_rdp_and_prv(q, sigma, steps, delta):
    opacus_accountants = pytest.importorskip("opacus.accountants")
    counts = (((q, sigma), steps),)
    rdp = opacus_accountants.RDPAccountant()
    rdp.history = [(sigma, q, steps)]
    assert epsilon_of(counts, delta, accountant="rdp") == pytest.approx(rdp.get_epsilon(delta), rel=3e-3)
    prv = opacus_accountants.PRVAccountant()
    prv.history = [(sigma, q, steps)]
    prv_eps = prv.get_epsilon(delta, eps_error=0.01)
    pld_eps = epsilon_of(counts, delta)
    assert pld_eps == pytest.approx(prv_eps, rel=1e-2, abs=0.02)
    # RDP is an upper bound of the (near-tight) PLD figure
    assert epsilon_of(counts, delta, accountant="rdp") >= pld_eps


@settings(max_examples=10, deadline=None)
@given(q=st.floats(0.001, 1.0), sigma=st.floats(0.5, 5.0), steps=st.integers(1, 300),
       more=st.integers(1, 300), factor=st.floats(1.05, 2.0))
def test_monotone_in_steps_and_noise(q, sigma, steps, more, factor):
    """More steps, or less noise, never gives a smaller epsilon (PLD coarse grid and RDP)."""
    for acc, kw in (("pld", {"value_discretization_interval": COARSE_DISCRETIZATION_INTERVAL}), ("rdp", {})):
        base = epsilon_of((((q, sigma), steps),), 1e-5, accountant=acc, **kw)
        longer = epsilon_of((((q, sigma), steps + more),), 1e-5, accountant=acc, **kw)
        noisier = epsilon_of((((q, sigma * factor), steps),), 1e-5, accountant=acc, **kw)
        assert longer >= base - 1e-9
        assert noisier <= base + 1e-9


def test_epsilon_and_delta_are_inverse():
    counts = (((0.02, 1.0), 300),)
    eps = epsilon_of(counts, 1e-6)
    assert delta_of(counts, eps) <= 1e-6 * (1 + 1e-6)
    assert delta_of(counts, eps * 0.98) > 1e-6


def test_empty_composition_is_free():
    assert epsilon_of((), 1e-5) == 0.0
    assert delta_of((), 1.0) == 0.0


@pytest.mark.parametrize("delta", [0.0, 1.0, -1e-5, 2.0])
def test_bad_delta_is_a_config_error(delta):
    with pytest.raises(ConfigError, match="delta"):
        epsilon_of((((0.01, 1.0), 10),), delta)


def test_bad_accountant_and_adjacency():
    with pytest.raises(ConfigError, match="accountant"):
        epsilon_of((((0.01, 1.0), 10),), 1e-5, accountant="prv")
    with pytest.raises(ConfigError, match="adjacency"):
        epsilon_of((((0.01, 1.0), 10),), 1e-5, adjacency="swap")
    with pytest.raises(ConfigError, match="epsilon"):
        delta_of((((0.01, 1.0), 10),), -1.0)
