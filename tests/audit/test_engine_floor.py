"""The relative-error floor of ``raptor check``'s clipped sums: the largest FINITE |sum| sets its scale,
so a non-finite entry neither makes the floor NaN / inf nor hides a mismatch."""

from __future__ import annotations

import math

import pytest
import torch

from raptor.audit import engine_check as check
from raptor.per_sample.engine import EngineResult, PerRecordEngine


def test_floor_is_the_scale_of_the_finite_entries():
    g = torch.Generator().manual_seed(0)
    sums = [torch.randn(3, 4, generator=g, dtype=torch.float64), torch.randn(5, generator=g, dtype=torch.float64)]
    eps = torch.finfo(torch.float64).eps
    plain = 1e3 * eps * max(float(v.abs().max()) for v in sums)
    assert check._sum_floor(sums) == plain  # finite inputs: exactly the plain max
    bad = [sums[0].clone(), sums[1].clone()]
    bad[0][0, 0], bad[0][1, 1], bad[1][2] = float("nan"), float("inf"), float("-inf")
    floor = check._sum_floor(bad)
    assert math.isfinite(floor) and floor > 0
    finite = [v[torch.isfinite(v)] for v in bad]
    assert floor == 1e3 * eps * max(float(v.abs().max()) for v in finite)
    assert check._sum_floor([torch.full((2,), float("nan"))]) == 0.0
    assert check._sum_floor([torch.zeros(0)]) == 0.0 and check._sum_floor([]) == 0.0
    assert check._sum_floor([torch.ones(2, dtype=torch.bfloat16)]) == 1e3 * torch.finfo(torch.bfloat16).eps


def _poisoned(result: EngineResult, value: float) -> EngineResult:
    """``result`` with one entry of its first non-empty clipped sum set to ``value``."""
    sums = dict(result.clipped_sums)
    name = next(n for n in sorted(sums) if sums[n].numel())
    sums[name] = sums[name].clone()
    sums[name].view(-1)[0] = value
    return EngineResult(loss_B=result.loss_B, norms=result.norms, clipped_sums=sums, owners=result.owners,
                        num_nonfinite=result.num_nonfinite, nonfinite_B=result.nonfinite_B,
                        clip_factors=result.clip_factors)


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_nonfinite_sum_in_the_reference_alone_fails_the_check(value, monkeypatch):
    reference = check.reference_compute
    monkeypatch.setattr(check, "reference_compute", lambda *a, **k: _poisoned(reference(*a, **k), value))
    report = check.check_family("mixtral", batch_size=3, seq_len=6)
    assert report.max_rel_sum_error == float("inf") and not report.passed


def test_a_nonfinite_sum_on_both_sides_leaves_a_finite_floor(monkeypatch):
    """The same NaN in the engine's and the reference's sums: the other entries are still compared,
    against a finite floor (a NaN floor would make the error NaN)."""
    reference, compute = check.reference_compute, PerRecordEngine.compute
    monkeypatch.setattr(check, "reference_compute", lambda *a, **k: _poisoned(reference(*a, **k), float("nan")))
    monkeypatch.setattr(PerRecordEngine, "compute", lambda self, *a, **k: _poisoned(compute(self, *a, **k), float("nan")))
    report = check.check_family("mixtral", batch_size=3, seq_len=6)
    assert math.isfinite(report.max_rel_sum_error) and report.max_rel_sum_error <= report.tolerance
    assert report.passed, report.to_dict()
