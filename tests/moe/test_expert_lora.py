"""raptor's per-expert LoRA on fused experts: the forward it computes, and its per-expert grouping."""

from __future__ import annotations

import pytest
import torch

from raptor.audit.engine_check import to_float64
from raptor.errors import ConfigError, UnsupportedModelError
from raptor.moe.adapters import get_adapter
from raptor.moe.expert_lora import add_expert_lora, has_expert_lora, merge_expert_lora
from raptor.moe.models import build_model
from raptor.roles.groups import GroupKey, ParamSlice, build_group_map


def _batch():
    ids = torch.randint(3, 500, (3, 7), generator=torch.Generator().manual_seed(0))
    return ids, torch.ones_like(ids)


def test_starts_as_identity_and_matches_a_per_token_reference():
    model = to_float64(build_model("mixtral", generator=torch.Generator().manual_seed(0)))
    ids, mask = _batch()
    model.config._experts_implementation_internal = "eager"
    before = model(input_ids=ids, attention_mask=mask).logits
    names = add_expert_lora(model, rank=2, alpha=4.0, generator=torch.Generator().manual_seed(1))
    assert len(names) == 8
    torch.testing.assert_close(model(input_ids=ids, attention_mask=mask).logits, before)  # B = 0
    experts = model.model.layers[0].mlp.experts
    with torch.no_grad():
        for n, p in experts.named_parameters():
            if "lora_B" in n:
                p.normal_(generator=torch.Generator().manual_seed(2))
    x = torch.randn(5, experts.gate_up_proj.shape[2], dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    idx = torch.tensor([[0, 1], [2, 1], [3, 0], [1, 2], [0, 3]])
    w = torch.rand(5, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    got = experts(x, idx, w)
    s = experts.raptor_lora_scaling
    expected = torch.zeros_like(x)
    for t in range(5):
        for j in range(2):
            e = int(idx[t, j])
            w_gu = experts.gate_up_proj[e] + s * experts.gate_up_proj_lora_B[e] @ experts.gate_up_proj_lora_A[e]
            w_d = experts.down_proj[e] + s * experts.down_proj_lora_B[e] @ experts.down_proj_lora_A[e]
            gate, up = (w_gu @ x[t]).chunk(2)
            expected[t] += w[t, j] * (w_d @ (experts.act_fn(gate) * up))
    torch.testing.assert_close(got, expected)


def test_lora_factors_are_sliced_per_expert_and_base_frozen():
    model = build_model("qwen3_moe")
    add_expert_lora(model, rank=2, alpha=4.0, generator=torch.Generator().manual_seed(1), layers=[1])
    assert not model.model.layers[1].mlp.experts.gate_up_proj.requires_grad
    model.model.layers[0].mlp.experts.requires_grad_(False)
    gmap = build_group_map(model, get_adapter(model).expert_params(model), trained_layers=[1], grouping="roles")
    slices = gmap.groups[GroupKey.expert(1, 3)]
    assert ParamSlice("model.layers.1.mlp.experts.down_proj_lora_B", 3) in slices
    assert len(slices) == 4


def test_refusals():
    with pytest.raises(UnsupportedModelError, match="PEFT LoRA"):
        add_expert_lora(build_model("switch_transformers"), rank=2, alpha=4.0, generator=torch.Generator())
    model = build_model("olmoe")
    add_expert_lora(model, rank=2, alpha=4.0, generator=torch.Generator())
    with pytest.raises(ConfigError, match="already"):
        add_expert_lora(model, rank=2, alpha=4.0, generator=torch.Generator())
    with pytest.raises(ConfigError, match="rank"):
        add_expert_lora(build_model("olmoe"), rank=0, alpha=4.0, generator=torch.Generator())


def test_merge_folds_the_adapted_weights_and_leaves_a_plain_model():
    model = to_float64(build_model("mixtral", generator=torch.Generator().manual_seed(0)))
    ids, mask = _batch()
    model.config._experts_implementation_internal = "eager"
    add_expert_lora(model, rank=2, alpha=4.0, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(generator=torch.Generator().manual_seed(2))
    adapted = model(input_ids=ids, attention_mask=mask).logits
    plain = to_float64(build_model("mixtral", generator=torch.Generator().manual_seed(0)))
    plain.config._experts_implementation_internal = "eager"
    assert not torch.allclose(plain(input_ids=ids, attention_mask=mask).logits, adapted)  # LoRA moved it
    merge_expert_lora(model)
    assert not any(has_expert_lora(m) for m in model.modules())
    assert model.config._experts_implementation_internal == "eager"  # the implementation before LoRA
    assert {n for n, _ in model.named_parameters()} == {n for n, _ in plain.named_parameters()}
    torch.testing.assert_close(model(input_ids=ids, attention_mask=mask).logits, adapted)
