"""The engine against the one-record-at-a-time oracle, for every family (METHOD.md rule 3)."""

from __future__ import annotations

import pytest

from raptor.audit.engine_check import check_family
from raptor.moe.models import FAMILIES

TOL = 1e-4


@pytest.mark.parametrize("grouping", ["roles", "dense"])
@pytest.mark.parametrize("family", FAMILIES)
def test_engine_matches_reference(family, grouping):
    report = check_family(family, grouping=grouping, batch_size=5, seq_len=8, seed=3)
    assert report.max_rel_norm_error <= TOL, report
    assert report.max_rel_sum_error <= TOL, report
    assert report.max_rel_loss_error <= TOL, report
    assert report.owners_match, report
    assert report.clipped_groups >= 1, "clipping must be active on some group for the test to mean anything"
    assert report.passed


@pytest.mark.parametrize("family", FAMILIES)
def test_engine_matches_reference_with_lora(family):
    grouping = "roles" if family != "olmoe" else "dense"
    report = check_family(family, grouping=grouping, lora=True, batch_size=4, seq_len=8, seed=5)
    assert report.passed, report
    assert report.clipped_groups >= 1


def test_switch_lora_on_experts_lands_in_expert_groups():
    report = check_family("switch_transformers", grouping="roles", lora=True, batch_size=5, seq_len=8, seed=2)
    assert report.passed, report
    # LoRA on wi/wo of the trained layer gives every expert group parameters
    assert report.num_groups == 1 + 4


@pytest.mark.parametrize("family", ["switch_transformers", "qwen2_moe", "deepseek_v3"])
def test_engine_matches_reference_in_float32(family):
    report = check_family(family, grouping="roles", batch_size=4, seq_len=8, seed=7, dtype="float32")
    assert report.passed, report


@pytest.mark.parametrize("grouping", ["roles", "dense"])
@pytest.mark.parametrize("family", ["switch_transformers", "olmoe", "qwen2_moe"])
def test_engine_matches_reference_with_a_regression_head(family, grouping):
    """One output, float labels, per-record squared error: engine vs the one-record loop."""
    report = check_family(family, grouping=grouping, batch_size=5, seq_len=8, seed=11, num_labels=1)
    assert report.head == "regression"
    assert report.passed, report
    assert report.clipped_groups >= 1
