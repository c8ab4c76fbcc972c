"""plan_budget: calibration on the safe side, the inverse-variance split, schedules and errors."""

from __future__ import annotations

import math

import dp_accounting
import pytest
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

from raptor.accounting import SIGMA_MAX, VALUE_DISCRETIZATION_INTERVAL, default_delta, plan_budget
from raptor.accounting.planning import FINE_RTOL, RDP_RTOL
from raptor.errors import ConfigError, InfeasibleTargetError

SST2 = dict(dataset_size=67349, batch_size=1024, epochs=3)


def _sg(q, sigma, steps):
    return dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps)


@pytest.fixture(scope="module")
def sst2_plan():
    return plan_budget(**SST2, epsilon=8.0)


def test_joint_plan_hits_the_target_from_below(sst2_plan):
    plan = sst2_plan
    assert plan.steps == math.ceil(67349 / 1024) * 3 == 198
    assert plan.sample_rate == 1024 / 67349
    assert plan.target_epsilon * (1 - FINE_RTOL) <= plan.epsilon <= plan.target_epsilon
    # independently: dp_accounting on the step built from the plan's two sigmas by the joint rule
    sigma_eff = (1 / plan.sigma_shared**2 + plan.num_layers / plan.sigma_expert**2) ** -0.5
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=VALUE_DISCRETIZATION_INTERVAL)
    acc.compose(_sg(plan.sample_rate, sigma_eff, plan.steps))
    assert acc.get_epsilon(plan.delta) == pytest.approx(plan.epsilon, rel=1e-9)
    assert plan.sigma_eff == pytest.approx(sigma_eff, rel=1e-12)
    # the default delta is reported and below 1/N
    assert plan.delta_is_default and plan.delta == 1e-6 < 1 / 67349


def test_plan_noise_is_the_least_that_fits(sst2_plan):
    """1% less noise than planned would overshoot the target (the plan is tight, not just safe)."""
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=VALUE_DISCRETIZATION_INTERVAL)
    acc.compose(_sg(sst2_plan.sample_rate, sst2_plan.sigma_eff * 0.99, sst2_plan.steps))
    assert acc.get_epsilon(sst2_plan.delta) > sst2_plan.target_epsilon


def test_shared_ratio_splits_inverse_variance(sst2_plan):
    plan = plan_budget(dataset_size=5000, batch_size=250, steps=100, epsilon=2.0, num_layers=3, shared_ratio=0.3,
                       accountant="rdp")
    assert 1 / plan.sigma_shared**2 == pytest.approx(0.3 / plan.sigma_eff**2, rel=1e-12)
    assert 3 / plan.sigma_expert**2 == pytest.approx(0.7 / plan.sigma_eff**2, rel=1e-12)
    assert [plan.phase(t) for t in range(3)] == ["joint"] * 3
    assert plan.noise_multiplier_for_step(5) == plan.sigma_eff
    # the joint epsilon depends on sigma_eff only, so r does not change it
    other = plan_budget(dataset_size=5000, batch_size=250, steps=100, epsilon=2.0, num_layers=3, shared_ratio=0.7,
                        accountant="rdp")
    assert other.sigma_eff == pytest.approx(plan.sigma_eff, rel=1e-9)


def test_alternating_plan_composes_two_phases():
    plan = plan_budget(**SST2, epsilon=4.0, alternate=(2, 1), num_layers=2, shared_ratio=0.3)
    assert plan.target_epsilon * (1 - FINE_RTOL) <= plan.epsilon <= plan.target_epsilon
    phases = [plan.phase(t) for t in range(plan.steps)]
    assert phases[:6] == ["shared", "shared", "expert"] * 2
    n_shared = phases.count("shared")
    assert (n_shared, plan.steps - n_shared) == (132, 66)
    sig_shared_step = plan.noise_multiplier_for_step(0)
    sig_expert_step = plan.noise_multiplier_for_step(2)
    assert sig_shared_step == plan.sigma_shared
    assert sig_expert_step == pytest.approx(plan.sigma_expert / math.sqrt(2), rel=1e-15)
    # per phase the same inverse-variance split: 1/sigma_s^2 = r/m^2, L/sigma_e^2 = (1-r)/m^2
    assert (1 / plan.sigma_shared**2) / (2 / plan.sigma_expert**2) == pytest.approx(0.3 / 0.7, rel=1e-12)
    # independently with dp_accounting: the two phases composed
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=VALUE_DISCRETIZATION_INTERVAL)
    acc.compose(dp_accounting.ComposedDpEvent([
        _sg(plan.sample_rate, plan.sigma_shared, n_shared),
        _sg(plan.sample_rate, plan.sigma_expert / math.sqrt(2), plan.steps - n_shared)]))
    assert acc.get_epsilon(plan.delta) == pytest.approx(plan.epsilon, rel=1e-6)
    # alternation releases less per step than joint steps with the same sigmas
    joint_same_sigmas = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-3)
    joint_same_sigmas.compose(_sg(plan.sample_rate, plan.sigma_eff, plan.steps))
    assert joint_same_sigmas.get_epsilon(plan.delta) > plan.epsilon


def test_rdp_and_replace_one_plans():
    base = dict(dataset_size=20000, batch_size=400, epochs=2, epsilon=3.0, delta=1e-6)
    rdp = plan_budget(**base, accountant="rdp")
    assert rdp.target_epsilon * (1 - RDP_RTOL) <= rdp.epsilon <= rdp.target_epsilon
    acc = rdp_privacy_accountant.RdpAccountant()
    acc.compose(_sg(rdp.sample_rate, rdp.sigma_eff, rdp.steps))
    assert acc.get_epsilon(1e-6) == pytest.approx(rdp.epsilon, rel=1e-9)
    replace = plan_budget(**base, accountant="rdp", adjacency="replace-one")
    assert replace.sigma_eff > rdp.sigma_eff  # doubled sensitivity needs more noise
    assert replace.epsilon <= 3.0
    assert not rdp.delta_is_default


def test_single_stream_plans():
    dense = plan_budget(dataset_size=5000, batch_size=100, steps=50, epsilon=2.0, streams=("shared",),
                        num_layers=0, accountant="rdp")
    assert dense.sigma_expert is None and dense.shared_ratio is None
    assert dense.sigma_shared == dense.sigma_eff and dense.phase(0) == "shared"
    experts = plan_budget(dataset_size=5000, batch_size=100, steps=50, epsilon=2.0, streams=("expert",),
                          num_layers=4, accountant="rdp")
    assert experts.sigma_shared is None and experts.phase(0) == "expert"
    assert experts.sigma_expert / 2 == pytest.approx(dense.sigma_shared, rel=1e-12)


def test_more_epochs_or_smaller_budget_needs_more_noise():
    base = dict(dataset_size=20000, batch_size=400, accountant="rdp")
    s1 = plan_budget(**base, epochs=1, epsilon=3.0).sigma_eff
    s3 = plan_budget(**base, epochs=3, epsilon=3.0).sigma_eff
    s3_tight = plan_budget(**base, epochs=3, epsilon=1.0).sigma_eff
    assert s1 < s3 < s3_tight


def test_infeasible_targets_raise_clear_errors():
    with pytest.raises(InfeasibleTargetError, match=r"epsilon=0.0001 is out of reach.*1000"):
        plan_budget(**SST2, epsilon=1e-4)
    with pytest.raises(InfeasibleTargetError, match=r"epsilon=500 is so loose.*0.3"):
        plan_budget(**SST2, epsilon=500.0)
    assert SIGMA_MAX == 1000.0


@pytest.mark.parametrize("kwargs,match", [
    (dict(batch_size=2000, dataset_size=1000), "batch_size=2000 exceeds dataset_size=1000"),
    (dict(epsilon=0.0), "epsilon=0.0"),
    (dict(epsilon=-1.0), "epsilon=-1.0"),
    (dict(delta=0.0), "delta=0.0"),
    (dict(delta=1.0), "delta=1.0"),
    (dict(delta=0.01), "not below 1/N"),
    (dict(steps=10), "exactly one of epochs"),
    (dict(epochs=0), "epochs=0"),
    (dict(shared_ratio=1.0), "shared_ratio=1.0"),
    (dict(num_layers=0), "num_layers=0"),
    (dict(alternate=(0, 1)), "alternate"),
    (dict(alternate=(1, 1), streams=("shared",)), "needs both streams"),
    (dict(streams=("shared", "router")), "streams"),
    (dict(accountant="prv"), "accountant"),
    (dict(adjacency="swap"), "adjacency"),
])
def test_bad_arguments_are_config_errors(kwargs, match):
    args = dict(dataset_size=1000, batch_size=100, epochs=1, epsilon=2.0, accountant="rdp")
    args.update(kwargs)
    with pytest.raises(ConfigError, match=match):
        plan_budget(**args)


@pytest.mark.parametrize("n", [1, 2, 10, 1000, 67349, 392702, 10**8])
def test_default_delta_is_below_one_over_n(n):
    d = default_delta(n)
    assert 0 < d <= 0.1 and d < 1 / n and d <= 1 / (n * max(math.log(n), 1.0))
    assert math.log10(d) == pytest.approx(round(math.log10(d)))  # a power of ten


def test_plan_phase_rejects_steps_outside_the_plan(sst2_plan):
    with pytest.raises(ConfigError, match="outside the plan"):
        sst2_plan.phase(sst2_plan.steps)
    with pytest.raises(ConfigError):
        sst2_plan.noise_multiplier_for_step(-1)


def test_plan_to_dict_is_json_safe(sst2_plan):
    import json

    d = json.loads(json.dumps(sst2_plan.to_dict()))
    assert d["sigma_shared"] == sst2_plan.sigma_shared and d["steps"] == 198
    assert d["planned_runs"] == [{"sample_rate": sst2_plan.sample_rate, "noise_multiplier": sst2_plan.sigma_eff,
                                  "count": 198, "label": "joint"}]


def _bisect(f, target, lo, hi, iters=200):
    """Slow, obviously-correct reference: plain bisection keeping f(hi) <= target."""
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        if f(mid) <= target:
            hi = mid
        else:
            lo = mid
    return hi


@pytest.mark.parametrize("f,target", [
    (lambda m: 5.0 / m**1.7, 2.0),
    (lambda m: math.exp(3.0 / m) - 1.0, 0.7),
    (lambda m: math.inf if m < 0.9 else 1.0 / (m - 0.8), 4.0),  # infinite epsilon below 0.9
])
def test_search_matches_plain_bisection(f, target):
    from raptor.accounting.planning import SIGMA_MIN, _search

    m, fm = _search(f, target, 1.0, 2.0, 1e-9, None)
    ref = _bisect(f, target, SIGMA_MIN, SIGMA_MAX)
    assert fm == f(m) <= target  # safe side
    assert m == pytest.approx(ref, rel=1e-6)


def test_search_reports_both_infeasible_ends():
    from raptor.accounting.planning import SIGMA_MIN, _search, _TooLoose, _TooTight

    with pytest.raises(_TooTight) as tight:
        _search(lambda m: 1.0 / m, 1e-4, 1.0, 4.0, 1e-3, None)
    assert tight.value.m == SIGMA_MAX
    with pytest.raises(_TooLoose) as loose:
        _search(lambda m: 1.0 / m, 100.0, 1.0, 4.0, 1e-3, None)
    assert loose.value.m == SIGMA_MIN


def test_the_warm_start_quiets_only_its_own_threads_rdp_warnings(monkeypatch):
    """The RDP warm start drops dp_accounting's "failed to converge" warnings of the calibrating
    thread; another thread's, logged meanwhile, are kept, and the absl logger's filters are restored."""
    import logging
    import threading

    import raptor.accounting.planning as planning

    logger = logging.getLogger("absl")
    messages: list[str] = []

    class Record(logging.Handler):
        def emit(self, record):
            messages.append(record.getMessage())

    inside, other_logged = threading.Barrier(2), threading.Barrier(2)
    real_search, calls = planning._search, []

    def search(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:  # the RDP warm start, inside the quiet block
            inside.wait(timeout=60)
            other_logged.wait(timeout=60)
            logger.warning("order 1.5 failed to converge (calibrating thread)")
        return real_search(*args, **kwargs)

    def other():
        inside.wait(timeout=60)
        logger.warning("order 1.5 failed to converge (other thread)")
        other_logged.wait(timeout=60)

    handler, level, before = Record(), logger.level, list(logger.filters)
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    monkeypatch.setattr(planning, "_search", search)
    thread = threading.Thread(target=other)
    thread.start()
    try:
        plan_budget(dataset_size=1000, batch_size=50, steps=20, epsilon=2.0)
    finally:
        thread.join(timeout=60)
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert "order 1.5 failed to converge (other thread)" in messages
    assert "order 1.5 failed to converge (calibrating thread)" not in messages
    assert logger.filters == before
