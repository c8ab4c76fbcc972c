"""Adapter registry and per-family declarations (contract test over every family)."""

from __future__ import annotations

import pytest
import torch

from raptor.errors import UnsupportedModelError
from raptor.moe.adapters import get_adapter, supported_model_types
from raptor.moe.models import FAMILIES, build_model


def test_registry_covers_families_and_unknown_lists_supported():
    assert set(FAMILIES) <= set(supported_model_types())
    with pytest.raises(UnsupportedModelError, match="supported: .*olmoe"):
        get_adapter("bert")


@pytest.mark.parametrize("family", FAMILIES)
def test_adapter_contract(family):
    model = build_model(family, generator=torch.Generator().manual_seed(0))
    adapter = get_adapter(model)
    layers = adapter.moe_layers(model)
    assert [info.index for info in layers] == [0, 1]
    for info in layers:
        assert info.num_experts == 4
        top1 = family in ("switch_transformers", "bert_moe")  # the module_dict families route top-1
        assert info.top_k == (1 if top1 else 2)
        assert info.fused == (not top1)
        expected_shared = {"qwen2_moe": 2, "deepseek_v2": 1, "deepseek_v3": 1}.get(family, 0)
        assert len(info.shared_experts) == expected_shared
    # batch-coupling features: switched on here, switched off by prepare
    model.config.router_aux_loss_coef = 0.01
    if hasattr(model.config, "output_router_logits"):
        model.config.output_router_logits = True
    for module in model.modules():
        if hasattr(module, "jitter_noise"):
            module.jitter_noise = 0.1
    changed = adapter.prepare(model)
    assert "router_aux_loss_coef" in changed
    policy = adapter.aux_policy(model)
    assert policy["router_aux_loss_coef"] == 0.0
    assert not policy.get("output_router_logits", False)
    assert all(getattr(m, "jitter_noise", 0.0) == 0.0 for m in model.modules())


def test_deepseek_v3_correction_bias_stays_a_frozen_buffer():
    model = build_model("deepseek_v3")
    adapter = get_adapter(model)
    adapter.prepare(model)
    buffers = [n for n, _ in model.named_buffers() if n.endswith("e_score_correction_bias")]
    assert buffers and not any(n.endswith("e_score_correction_bias") for n, _ in model.named_parameters())
    gate = adapter.moe_layers(model)[0].router
    bias = gate.e_score_correction_bias
    del gate._buffers["e_score_correction_bias"]
    gate.e_score_correction_bias = torch.nn.Parameter(bias.clone())
    with pytest.raises(UnsupportedModelError, match="e_score_correction_bias"):
        adapter.prepare(model)


def test_one_record_per_family_declares_what_the_code_needs():
    from pathlib import Path

    from raptor.moe.adapters import DISPATCHES, TinySize, get_adapter
    from raptor.moe.models import FAMILIES, build_model

    for family in FAMILIES:
        adapter = get_adapter(family)
        assert adapter.dispatch in DISPATCHES and adapter.lora_targets
        assert adapter.classification_class().__name__.endswith("ForSequenceClassification")
        assert isinstance(adapter.tiny_config_kwargs(TinySize()), dict)
        model = build_model(family)
        layers = adapter.moe_layers(model)
        assert all(info.dispatch == adapter.dispatch for info in layers)
        assert all(info.top_k == (1 if adapter.top1 else getattr(model.config, adapter.top_k_attr)) for info in layers)
    # the engine reads the family's record; it names no family
    engine_src = (Path(__file__).resolve().parents[2] / "src" / "raptor" / "per_sample" / "engine.py").read_text()
    assert "switch" not in engine_src.lower()
