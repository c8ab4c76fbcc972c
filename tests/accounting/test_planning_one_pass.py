"""Noise planning in one pass (issue 34 item 4): each noise scale the calibration tries is split into
the streams' sigmas once, the plan keeps that split, and accounting/ has no function over about 80 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import raptor.accounting.planning as planning
from raptor.accounting import plan_budget

ACCOUNTING = Path(planning.__file__).resolve().parent
MAX_LINES = 80


def test_each_noise_scale_is_split_once_and_the_plan_keeps_the_split(monkeypatch):
    calls: list[float] = []
    split = planning.split_noise_multiplier

    def counted(sigma_eff, shared_ratio, num_layers):
        calls.append(sigma_eff)
        return split(sigma_eff, shared_ratio, num_layers)

    monkeypatch.setattr(planning, "split_noise_multiplier", counted)
    for accountant in ("pld", "rdp"):
        calls.clear()
        plan = plan_budget(dataset_size=1000, batch_size=50, steps=100, epsilon=3.0, shared_ratio=0.7,
                           accountant=accountant)
        assert calls and len(calls) == len(set(calls)), f"{accountant}: a noise scale was split more than once"
        assert (plan.sigma_shared, plan.sigma_expert) in [split(m, 0.7, 1) for m in calls]
        # the plan's epsilon is exactly what its ledger computes after the planned releases
        assert plan.epsilon == plan.to_ledger().epsilon(plan.delta, planned=True) <= 3.0


def test_no_function_in_accounting_exceeds_80_lines_without_a_reason():
    long = []
    for path in sorted(ACCOUNTING.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                doc = ast.get_docstring(node) or ""
                if lines > MAX_LINES and "long because" not in doc:
                    long.append(f"{path.name}:{node.name} ({lines} lines)")
    assert long == [], f"split these, or say in the docstring why each is long ('long because ...'): {long}"
