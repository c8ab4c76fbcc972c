"""Issue 15: a resumed run's recomputed public statistics are compared with the saved ones within a
relative tolerance (another device may round the last bits), everything else exactly."""

from __future__ import annotations

import math

from raptor.training.saving.fingerprint import PLAN_REL_TOL, plan_differences

PLAN = {"grouping": "roles", "trained_layers": [1],
        "groups": {"shared": {"clip_norm": 1.0, "denominator": 8.0, "sigma": 0.916, "stream": "shared"},
                   "expert/1/0": {"clip_norm": 0.37, "denominator": 2.2857142857142856, "sigma": 0.6,
                                  "stream": "expert"}},
        "public": {"shares": [0.2857142857142857, 0.7142857142857143], "entropy": -0.0, "bias": None,
                   "noise": math.inf}}


def _with(path, value):
    import copy

    plan = copy.deepcopy(PLAN)
    node = plan
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value(node[path[-1]])
    return plan


def test_tolerance_is_stated():
    assert PLAN_REL_TOL == 1e-6


def test_rounding_differences_are_accepted():
    assert plan_differences(PLAN, PLAN) == []
    for path in (("groups", "expert/1/0", "denominator"), ("public", "shares", 1), ("groups", "shared", "sigma")):
        assert plan_differences(PLAN, _with(path, lambda v: v * (1 + 3e-7))) == [], path
        assert plan_differences(PLAN, _with(path, lambda v: math.nextafter(v, 0.0))) == [], path
    assert plan_differences(PLAN, _with(("public", "entropy"), lambda v: 0.0)) == []  # -0.0 == 0.0


def test_real_changes_are_refused_and_named():
    diff = plan_differences(PLAN, _with(("groups", "expert/1/0", "denominator"), lambda v: v * (1 + 1e-4)))
    assert len(diff) == 1 and diff[0].startswith("plan.groups.expert/1/0.denominator: 2.2857142857142856 -> ")
    assert plan_differences(PLAN, _with(("groups", "expert/1/0", "clip_norm"), lambda v: 0.38)) == \
        ["plan.groups.expert/1/0.clip_norm: 0.37 -> 0.38"]
    assert plan_differences(PLAN, _with(("trained_layers",), lambda v: [0])) == ["plan.trained_layers[0]: 1 -> 0"]
    assert plan_differences(PLAN, _with(("trained_layers",), lambda v: [0, 1])) == \
        ["plan.trained_layers: [1] -> [0, 1]"]
    assert plan_differences(PLAN, _with(("public", "noise"), lambda v: 1e300)) == ["plan.public.noise: inf -> 1e+300"]
    assert plan_differences(PLAN, _with(("public", "bias"), lambda v: 0.0)) == ["plan.public.bias: None -> 0.0"]
    assert plan_differences(PLAN, _with(("groups", "shared", "stream"), lambda v: "expert")) == \
        ["plan.groups.shared.stream: 'shared' -> 'expert'"]
    moved = _with(("groups",), lambda g: {**g, "expert/1/1": {"clip_norm": 1.0}})
    assert plan_differences(PLAN, moved) == ["plan.groups.expert/1/1: missing -> {'clip_norm': 1.0}"]
    many = _with(("public", "shares"), lambda v: [x + 0.1 for x in v] * 4)
    assert plan_differences(PLAN, many) == ["plan.public.shares: [0.2857142857142857, 0.7142857142857143] -> "
                                            + repr(many["public"]["shares"])]


def test_a_default_batch_size_is_named_in_a_resume_refusal():
    from raptor.training.saving.fingerprint import fingerprint_differences

    saved = {"config": {"method": "raptor", "batch_size": None}}
    now = {"config": {"method": "raptor", "batch_size": 64}}
    assert fingerprint_differences(saved, now) == ["--batch-size (batch_size): the default (N/10) -> 64"]
