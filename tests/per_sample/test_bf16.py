"""The bf16 engine vs the float64 one-record oracle (same weights), every family, on CPU.

Tolerance :data:`raptor.audit.engine_check.BF16_TOLERANCE` (5e-2 relative, max over records and
groups, of per-record norms, clipped sums and losses, with clipping active): bf16 keeps 8
significant bits (~4e-3 relative per rounding) and the errors of a few layers add up; the measured
maxima are in docs/DISTRIBUTED.md. The clipped sums come back in float32 and the norms in float64.
"""

from __future__ import annotations

import copy

import pytest
import torch

from raptor.audit.engine_check import (
    BF16_TOLERANCE,
    _layers,
    check_family,
    freeze_untrained_experts,
    synthetic_batch,
)
from raptor.moe.models import FAMILIES, build_model
from raptor.per_sample.engine import PerRecordEngine


@pytest.mark.parametrize("family", FAMILIES)
def test_bf16_engine_matches_the_float64_oracle(family):
    report = check_family(family, grouping="roles", dtype="bfloat16", tolerance=BF16_TOLERANCE)
    assert report.passed, report.to_dict()
    assert report.owners_match and report.clipped_groups > 0
    # > 0: the engine really ran in bf16 (a float64 run matches to ~1e-12)
    assert report.max_rel_norm_error > 1e-5 and report.max_rel_sum_error > 1e-5


def test_bf16_engine_returns_float32_sums_and_float64_norms():
    g = torch.Generator().manual_seed(0)
    model = build_model("switch_transformers", generator=g)
    trained = [info.index for info in _layers(model)][-1:]
    freeze_untrained_experts(model, trained)
    batch = synthetic_batch(model.config.vocab_size, 4, 8, g)
    engine = PerRecordEngine(copy.deepcopy(model).to(torch.bfloat16), trained_layers=trained, grouping="roles")
    got = engine.compute(batch, {k: 1.0 for k in engine.group_keys})
    assert all(s.dtype == torch.float32 for s in got.clipped_sums.values())
    assert all(n.dtype == torch.float64 for n in got.norms.values())


def test_dense_and_lora_bf16_checks_pass_for_one_family():
    for grouping, lora in (("dense", False), ("roles", True)):
        report = check_family("olmoe", grouping=grouping, lora=lora, dtype="bfloat16", tolerance=BF16_TOLERANCE)
        assert report.passed, report.to_dict()
