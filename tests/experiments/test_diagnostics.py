"""Failure-mode diagnostics on a tiny model: shapes of the report and the quantities it must obey."""

from __future__ import annotations

import math

import pytest
import torch

from raptor.experiments.diagnostics import failure_mode_diagnostics
from raptor.moe.adapters import get_adapter
from raptor.moe.models import build_model


@pytest.mark.parametrize("family", ["switch_transformers", "olmoe"])
def test_diagnostics_report(family, tmp_path):
    model = build_model(family).double()
    layers = get_adapter(model).moe_layers(model)
    trained = layers[-1].index
    for info in layers:
        if info.index != trained:
            info.experts.requires_grad_(False)
    g = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(2):
        ids = torch.randint(3, 200, (6, 8), generator=g)
        batches.append({"input_ids": ids, "attention_mask": torch.ones_like(ids),
                        "labels": torch.randint(0, 2, (6,), generator=g)})
    diag = failure_mode_diagnostics(model, batches, trained_layers=[trained], batch_size=64, clip_dense=1.0,
                                    clip_shared=1.0, clip_expert=0.5, sigma_dense=1.0, sigma_shared=1.2,
                                    sigma_expert=1.5)
    assert diag["public_records"] == 12
    shares = diag["suppression"]["expert_share_of_sq_norm"]["values"]
    assert len(shares) == 12 and all(0.0 <= s <= 1.0 for s in shares)
    gf = diag["suppression"]["global_clip_factor"]["values"]
    assert all(0.0 < f <= 1.0 for f in gf)
    loads = [e["public_load"] for e in diag["experts"]]
    assert math.isclose(sum(loads), 1.0)  # every public record has exactly one owner in the layer
    for e in diag["experts"]:
        assert e["dilution_factor_B"] == e["public_load"]
        assert e["noise_raptor"] == pytest.approx(1.5 * 0.5 * math.sqrt(e["params"]))
        assert e["noise_dense"] == pytest.approx(1.0 * 1.0 * math.sqrt(e["params"]))
        if e["public_load"] == 0:
            assert e["signal_raptor"] == 0.0  # no owner, no role-clipped signal
    from raptor.experiments.diagnostics import plot_failure_modes

    pytest.importorskip("matplotlib")
    out = plot_failure_modes(diag, tmp_path / "f.png", title=family)
    assert out.stat().st_size > 1000
