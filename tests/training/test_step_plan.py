"""The step plan: what is released and what is accounted come from one object and agree.

For every method and schedule, calibrated and fixed: each released group's sigma is its stream's
planned sigma, and the ledger sigma of every update equals the sigma_eff that the released groups
amount to (recomputed from the groups alone) and the noise plan's own per-step sigma.
"""

from __future__ import annotations

import math

import pytest

from raptor.errors import ConfigError
from raptor.recipes import tiny_recipe
from raptor.roles.groups import GroupKey, ParamSlice
from raptor.roles.public_stats import group_denominators
from raptor.training.config import PrivacyConfig, Schedule
from raptor.training.methods import METHOD_SPECS
from raptor.training.step.noise_plans import FixedPlan, make_noise_plan
from raptor.training.step.plan import accounted_sigma, build_step_plan

N, B, E = 400, 40, 4


def _groups(grouping: str, layers: tuple[int, ...]) -> dict:
    if grouping == "dense":
        return {GroupKey.dense(): (ParamSlice("w"),)}
    groups = {GroupKey.shared(): (ParamSlice("w"),)}
    for layer in layers:
        for e in range(E):
            groups[GroupKey.expert(layer, e)] = (ParamSlice(f"experts.{layer}", e),)
    return groups


def _plan(method: str, *, layers=(1,), schedule=None, fixed=False, steps=6):
    schedule = schedule or Schedule()
    spec = METHOD_SPECS[method]
    trained = layers if spec.uses_layers or spec.trainable == "experts" else ()
    groups = _groups(spec.grouping or "dense", trained if spec.grouping == "roles" else ())
    if spec.trainable == "experts":  # expert-only: shared parameters frozen, the shared group empty
        groups[GroupKey.shared()] = ()
    if spec.trainable == "shared":  # shared-only: experts frozen, their groups empty
        groups.update({GroupKey.expert(1, e): () for e in range(E)})
    privacy = PrivacyConfig(epsilon=None if method == "nonprivate" or fixed else 4.0, secure_rng=False,
                            schedule=schedule, accountant="rdp",
                            noise_multipliers=(1.3, 2.1) if fixed and method != "nonprivate" else None)
    config = tiny_recipe(method, steps=steps, batch_size=B, privacy=privacy)
    noise = make_noise_plan(config, spec, dataset_size=N,
                            num_layers=len(trained) if spec.grouping == "roles" else 0)
    shares = {layer: [0.1, 0.2, 0.3, 0.4] for layer in (*trained, 1)}
    return noise, build_step_plan(noise, groups, clip_norms={k: 0.5 for k in groups},
                                  denominators=group_denominators(groups, batch_size=B, shares=shares, kind="public"),
                                  trained_layers=trained, grouping=spec.grouping or "plain",
                                  epsilon_budget=config.privacy.epsilon)


CASES = [(m, Schedule(), fixed) for m in METHOD_SPECS for fixed in (False, True)] + [
    ("raptor", Schedule((1, 1)), False), ("raptor", Schedule((2, 3)), False), ("raptor", Schedule((1, 2)), True)]


@pytest.mark.parametrize("method, schedule, fixed", CASES)
def test_released_sigma_per_group_equals_accounted_sigma(method, schedule, fixed):
    noise, plan = _plan(method, schedule=schedule, fixed=fixed)
    planned = {"shared": noise.sigma_shared, "expert": noise.sigma_expert}
    phases = set()
    for t in range(plan.steps):
        step = plan.step(t)
        phases.add(step.phase)
        assert step.groups, "every planned update releases something"
        for g in step.groups:
            assert g.sigma == planned[g.stream] and g.stream in step.streams
        if method == "nonprivate":
            assert step.ledger_sigma is None and all(g.sigma == 0 for g in step.groups)
            continue
        assert step.ledger_sigma == noise.noise_multiplier_for_step(t)
        assert accounted_sigma(step.groups) == pytest.approx(step.ledger_sigma, rel=1e-12)
    if schedule.alternate is not None:
        assert phases == {"shared", "expert"}
        # an alternating step releases (and steps) one stream only
        assert {g.stream for g in plan.step(0).groups} == {"shared"}


def test_a_stream_without_a_planned_sigma_is_an_error_not_zero_noise():
    groups = _groups("roles", (1,))
    noise = FixedPlan(0.1, 3, {"shared": 1.0}, 0)  # expert stream not planned
    with pytest.raises(ConfigError, match="does not release"):
        build_step_plan(noise, groups, clip_norms={k: 1.0 for k in groups},
                        denominators={k: 4.0 for k in groups}, trained_layers=(1,), grouping="roles")


def test_plan_with_the_wrong_number_of_layers_is_refused():
    groups = _groups("roles", (0, 1))
    noise = FixedPlan(0.1, 3, {"shared": 1.0, "expert": 2.0}, 1)  # says L = 1, releases two layers
    with pytest.raises(ConfigError, match="disagree"):
        build_step_plan(noise, groups, clip_norms={k: 1.0 for k in groups},
                        denominators={k: 4.0 for k in groups}, trained_layers=(0, 1), grouping="roles")


def test_accounted_sigma_of_a_joint_step():
    _, plan = _plan("raptor", layers=(0, 1), fixed=True)
    assert accounted_sigma(plan.step(0).groups) == pytest.approx((1 / 1.3**2 + 2 / 2.1**2) ** -0.5)
    assert math.isclose(plan.step(0).ledger_sigma, (1 / 1.3**2 + 2 / 2.1**2) ** -0.5, rel_tol=1e-12)
