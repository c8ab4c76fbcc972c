"""The white-box audit of one update's real release path: tight on the correct mechanism, and above
the claim for each deliberately broken variant (which proves the audit can fail).

Seeds are fixed, so each audit is deterministic. Stated factors: the joint audit's bound is within
a factor 2 of the accounted epsilon; a single stream's within a factor 3 (fewer dimensions carry the
signal, and its claim is smaller). Sizes: 20,000 releases per world for choosing the threshold and
20,000 for the bound, confidence 95 %, delta 1e-2 (see raptor.audit.mechanism).
"""

from __future__ import annotations

import math

import pytest
import torch

from raptor.audit.mechanism import MechanismAuditConfig, _prepare, run_mechanism_audit
from raptor.errors import ConfigError


@pytest.mark.parametrize(("streams", "factor"), [("joint", 2.0), ("shared", 3.0), ("expert", 3.0)])
def test_correct_mechanism_bound_is_below_the_claim_and_within_a_factor(streams, factor):
    res = run_mechanism_audit(MechanismAuditConfig(streams=streams))
    assert res.claimed_epsilon / factor <= res.epsilon_lower_bound <= res.claimed_epsilon
    assert res.to_dict()["confidence"] == pytest.approx(0.95)


@pytest.mark.parametrize("variant", ["noise-4x-too-small", "realized-count-denominator", "non-owner-update"])
def test_broken_variants_are_caught(variant):
    res = run_mechanism_audit(MechanismAuditConfig(variant=variant))
    assert res.epsilon_lower_bound > 1.3 * res.claimed_epsilon


def test_per_stream_calibration_with_added_epsilons_is_caught():
    # Under-reporting by adding per-stream epsilons grows as q shrinks (rules.py); at q = 0.05 the
    # added claim is half the joint step's true epsilon.
    res = run_mechanism_audit(MechanismAuditConfig(variant="per-stream-sum", sample_rate=0.05, sigma_eff=0.4))
    assert res.epsilon_lower_bound > 1.1 * res.claimed_epsilon


def test_audit_inputs_come_from_the_real_engine():
    cfg = MechanismAuditConfig()
    prep = _prepare(cfg)
    # The canary is clipped to C in the shared group and in its owner's group, and reaches no other expert.
    keys = prep.engine.group_keys
    canary_norm = {k: 0.0 for k in keys}
    for k, slices in prep.engine.group_map.groups.items():
        sq = 0.0
        for sl in slices:
            s = prep.canary_sum[sl.name]
            sq += float((s if sl.index is None else s[sl.index]).double().pow(2).sum())
        canary_norm[k] = math.sqrt(sq)
    assert canary_norm[keys[0]] == pytest.approx(prep.clip_shared, rel=1e-4)
    assert canary_norm[prep.canary_owner_key] == pytest.approx(prep.clip_expert, rel=1e-4)
    assert all(canary_norm[k] == 0.0 for k in keys if k.is_expert and k != prep.canary_owner_key)
    assert prep.owner_counts[prep.canary_owner_key] == cfg.background_owners
    assert all(isinstance(v, torch.Tensor) for v in prep.background_sum.values())


def test_config_errors_name_the_flag():
    with pytest.raises(ConfigError, match="--variant"):
        MechanismAuditConfig(variant="nope")
    with pytest.raises(ConfigError, match="--sample-rate"):
        MechanismAuditConfig(sample_rate=0.0)
