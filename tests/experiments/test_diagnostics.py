"""Failure-mode diagnostics on a tiny model: shapes of the report and the quantities it must obey."""

from __future__ import annotations

import math

import pytest
import torch

from raptor.analysis.diagnostics import failure_mode_diagnostics
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
    from raptor.analysis.diagnostics import plot_failure_modes

    pytest.importorskip("matplotlib")
    out = plot_failure_modes(diag, tmp_path / "f.png", title=family)
    assert out.stat().st_size > 1000
    from raptor.analysis.composition import gradient_composition

    diag["composition"] = gradient_composition(model, {k: torch.cat([b[k] for b in batches]) for k in batches[0]},
                                               max_records=4)
    with_panel = plot_failure_modes(diag, tmp_path / "g.png", title=family)  # four panels, composition first
    assert with_panel.stat().st_size > out.stat().st_size


def test_small_shares_get_their_power_of_ten_in_the_axis_label():
    """matplotlib's offset text ('1e-5') overlapped the x label of panel 1; the factor now goes in the
    label and the values are rescaled into [1, 1000)."""
    from raptor.analysis.diagnostics import _display_exponent

    assert _display_exponent(2.8e-5) == -5
    assert _display_exponent(4.9e-6) == -6
    assert _display_exponent(0.009) == -3
    for readable in (0.0, 0.01, 0.5, 1.0, float("nan"), float("inf"), -1.0):
        assert _display_exponent(readable) == 0
    assert 1.0 <= 2.8e-5 / 10.0 ** _display_exponent(2.8e-5) < 1000.0


def test_replot_redraws_a_figure_from_its_json_alone(tmp_path, monkeypatch, capsys, experiment_script):
    """``failure_modes.py --replot JSON``: no model and no data; the title comes from the JSON."""
    import json

    pytest.importorskip("matplotlib")
    from raptor.analysis import diagnostics

    mod = experiment_script("failure_modes")

    experts = [{"layer": 1, "expert": e, "public_load": load, "snr_dense": 1e-5, "snr_raptor": 1e-3}
               for e, load in enumerate([0.25, 0.75])]
    diag = {"model": "m@1", "task": "rte", "epsilon": 1.0, "delta": 1e-5, "batch_size": 64, "steps": 10,
            "trained_layers": [1], "experts": experts,
            "suppression": {"expert_share_of_sq_norm": {"values": [1e-6, 3e-6]},
                            "global_clip_factor": {"median": 1.0}, "role_clip_factor": {"median": 0.9}}}
    path = tmp_path / "failure_modes_rte_m_eps1.json"
    path.write_text(json.dumps(diag))
    titles = []
    real_plot = diagnostics.plot_failure_modes
    monkeypatch.setattr(diagnostics, "plot_failure_modes",
                        lambda d, p, *, title="": titles.append(title) or real_plot(d, p, title=title))
    assert mod.main(["--replot", str(path)]) == 0
    assert path.with_suffix(".png").stat().st_size > 1000
    assert titles == ["m@1 / rte, public records, eps 1 (delta 1e-05), B 64, 10 steps, trained layer(s) [1]"]
    with pytest.raises(SystemExit):  # neither a model nor --replot: a usage error naming the flag
        mod.main([])
    assert "--model-dir is required" in capsys.readouterr().err
