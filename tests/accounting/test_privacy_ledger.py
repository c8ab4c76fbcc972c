"""PrivacyLedger: O(1) recording, queries against dp_accounting, JSON round trip, budget checks."""

from __future__ import annotations

import json

import dp_accounting
import pytest
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

from raptor.accounting import VALUE_DISCRETIZATION_INTERVAL, PrivacyLedger, epsilon_of, plan_budget
from raptor.errors import BudgetExceededError, ConfigError


def test_record_run_length_compresses_identical_consecutive_releases():
    ledger = PrivacyLedger()
    for _ in range(5000):
        ledger.record(0.01, 1.0)
    ledger.record(0.01, 1.0, label="shared")
    ledger.record(0.01, 2.0, count=3, label="expert")
    ledger.record(0.01, 1.0, count=2)
    assert len(ledger) == 5006
    assert [(r.noise_multiplier, r.count, r.label) for r in ledger.executed] == [
        (1.0, 5000, "joint"), (1.0, 1, "shared"), (2.0, 3, "expert"), (1.0, 2, "joint")]


def test_epsilon_matches_dp_accounting_on_the_ledgers_own_event():
    ledger = PrivacyLedger()
    ledger.record(0.02, 1.2, count=100, label="shared")
    ledger.record(0.02, 0.9, count=50, label="expert")
    ledger.record(0.02, 1.2, count=100, label="shared")
    pld = pld_privacy_accountant.PLDAccountant(value_discretization_interval=VALUE_DISCRETIZATION_INTERVAL)
    pld.compose(ledger.dp_event())
    # the ledger canonicalises the multiset; composition is commutative, so the figures agree
    assert ledger.epsilon(1e-5) == pytest.approx(pld.get_epsilon(1e-5), rel=1e-6)
    rdp_ledger = PrivacyLedger.from_dict({**ledger.to_dict(), "accountant": "rdp"})
    rdp = rdp_privacy_accountant.RdpAccountant()
    rdp.compose(ledger.dp_event())
    assert rdp_ledger.epsilon(1e-5) == pytest.approx(rdp.get_epsilon(1e-5), rel=1e-12)
    assert isinstance(ledger.dp_event(), dp_accounting.ComposedDpEvent)
    assert ledger.delta(ledger.epsilon(1e-5)) <= 1e-5 * (1 + 1e-6)


def test_empty_ledger_spends_nothing():
    ledger = PrivacyLedger()
    assert len(ledger) == 0
    assert ledger.epsilon(1e-5) == 0.0
    assert ledger.delta(0.5) == 0.0


def test_json_round_trip_is_exact():
    ledger = PrivacyLedger(accountant="rdp", adjacency="replace-one")
    ledger.record(1024 / 67349, 0.8138835191774575, count=7)
    ledger.record(1024 / 67349, 0.1 + 0.2, count=2, label="expert")
    ledger.add_planned(1024 / 67349, 0.8138835191774575, count=198)
    back = PrivacyLedger.from_dict(json.loads(json.dumps(ledger.to_dict())))
    assert back.executed == ledger.executed
    assert back.planned == ledger.planned
    assert (back.accountant, back.adjacency, len(back)) == ("rdp", "replace-one", 9)
    assert back.epsilon(1e-6) == ledger.epsilon(1e-6)
    assert back.to_dict() == ledger.to_dict()


def test_from_dict_rejects_other_objects():
    with pytest.raises(ConfigError, match="not a privacy ledger"):
        PrivacyLedger.from_dict({"executed": []})
    with pytest.raises(ConfigError, match="malformed"):
        PrivacyLedger.from_dict({"format": "raptor.privacy_ledger/1", "executed": [{"count": 3}]})


def test_check_can_record_is_a_dry_run_that_raises_over_budget():
    ledger = PrivacyLedger(accountant="rdp")
    ledger.record(0.05, 1.0, count=100)
    before = (len(ledger), ledger.executed, ledger.epsilon(1e-5))
    spent = before[2]
    ledger.check_can_record(0.05, 1.0, 1, epsilon_budget=spent + 1.0, delta=1e-5)  # fits: no error
    with pytest.raises(BudgetExceededError) as info:
        ledger.check_can_record(0.05, 1.0, 400, epsilon_budget=spent + 0.01, delta=1e-5)
    msg = str(info.value)
    assert "over the budget" in msg and f"{spent:.4f}" in msg and "100 step(s)" in msg
    assert (len(ledger), ledger.executed, ledger.epsilon(1e-5)) == before


def test_check_can_record_validates_its_arguments():
    ledger = PrivacyLedger()
    with pytest.raises(ConfigError, match="epsilon_budget"):
        ledger.check_can_record(0.01, 1.0, 1, epsilon_budget=0.0, delta=1e-5)
    with pytest.raises(ConfigError, match="sample_rate"):
        ledger.record(0.0, 1.0)
    with pytest.raises(ConfigError, match="noise_multiplier"):
        ledger.record(0.1, 0.0)
    with pytest.raises(ConfigError, match="count"):
        ledger.record(0.1, 1.0, count=0)
    with pytest.raises(ConfigError, match="accountant"):
        PrivacyLedger(accountant="prv")


def test_following_a_plan_ends_exactly_at_the_plans_epsilon():
    """A run that records plan.noise_multiplier_for_step(t) for every t ends at plan.epsilon <= target,
    and every per-step budget check on the way passes (the plan's bound covers each prefix)."""
    plan = plan_budget(dataset_size=6000, batch_size=200, steps=60, epsilon=3.0, alternate=(2, 1),
                       shared_ratio=0.4, num_layers=2, accountant="rdp")
    ledger = plan.to_ledger()
    for t in range(plan.steps):
        sigma = plan.noise_multiplier_for_step(t)
        ledger.check_can_record(plan.sample_rate, sigma, 1, plan.target_epsilon, plan.delta)
        ledger.record(plan.sample_rate, sigma, label=plan.phase(t))
    assert len(ledger) == plan.steps
    assert ledger.epsilon(plan.delta) == plan.epsilon <= plan.target_epsilon
    assert ledger.epsilon(plan.delta, planned=True) == plan.epsilon
    assert ledger.delta(plan.epsilon, planned=True) <= plan.delta * (1 + 1e-9)
    assert ledger.delta(plan.epsilon, planned=True) == ledger.delta(plan.epsilon)
    assert len(ledger.dp_event(planned=True).events) == len(plan.planned_runs()) == 2
    assert [r.label for r in ledger.executed][:4] == ["shared", "expert", "shared", "expert"]
    # going past the plan with a too-small budget is refused
    with pytest.raises(BudgetExceededError):
        ledger.check_can_record(plan.sample_rate, plan.noise_multiplier_for_step(0), 30, plan.epsilon, plan.delta)


def test_ledger_replace_one_uses_replace_one_accounting():
    add_remove, replace = PrivacyLedger(), PrivacyLedger(adjacency="replace-one")
    for ledger in (add_remove, replace):
        ledger.record(0.01, 1.0, count=200)
    assert replace.epsilon(1e-5) == pytest.approx(
        epsilon_of((((0.01, 1.0), 200),), 1e-5, adjacency="replace-one"), rel=1e-12)
    assert replace.epsilon(1e-5) > add_remove.epsilon(1e-5)


def test_per_step_checks_without_a_plan_agree_with_exact_checks_and_are_amortised(monkeypatch):
    """Every per-step check raises exactly when the exact epsilon of ledger + request exceeds the
    budget, and a long run of identical steps costs O(log T) accountant evaluations."""
    import raptor.accounting.ledger as ledger_module

    q, sigma, delta = 0.05, 1.0, 1e-5
    budget = epsilon_of((((q, sigma), 300),), delta, accountant="rdp")  # exactly 300 steps fit
    calls = []
    real = ledger_module.epsilon_of
    monkeypatch.setattr(ledger_module, "epsilon_of", lambda *a, **k: calls.append(a) or real(*a, **k))
    ledger = PrivacyLedger(accountant="rdp")
    for _ in range(300):
        ledger.check_can_record(q, sigma, 1, budget, delta)
        ledger.record(q, sigma)
    with pytest.raises(BudgetExceededError):
        ledger.check_can_record(q, sigma, 1, budget, delta)
    assert len(ledger) == 300
    assert len(calls) < 40  # far fewer than one evaluation per step
    # a looser delta or a larger budget is covered by what was verified; a tighter delta is not
    fresh = PrivacyLedger(accountant="rdp")
    fresh.check_can_record(q, sigma, 1, budget, delta)
    fresh.record(q, sigma)
    before = len(calls)
    fresh.check_can_record(q, sigma, 1, budget * 2, delta * 10)
    assert len(calls) == before
    fresh.check_can_record(q, sigma, 1, budget, delta / 10)
    assert len(calls) > before
