"""GroupKey, ParamSlice and build_group_map."""

from __future__ import annotations

import pytest
import torch

from raptor.errors import ConfigError
from raptor.moe.adapters import get_adapter
from raptor.moe.models import build_model
from raptor.roles.groups import GroupKey, ParamSlice, build_group_map


def test_group_key_forms_and_parse():
    assert str(GroupKey.shared()) == "shared"
    assert str(GroupKey.dense()) == "dense"
    key = GroupKey.expert(3, 1)
    assert str(key) == "expert/3/1" and key.is_expert
    for k in (GroupKey.shared(), GroupKey.dense(), key):
        assert GroupKey.parse(str(k)) == k
    with pytest.raises(ConfigError, match="cannot parse"):
        GroupKey.parse("expert/x/1")
    with pytest.raises(ConfigError, match="expert_id"):
        GroupKey("expert", 1, -1)
    with pytest.raises(ConfigError, match="kind"):
        GroupKey("other")


def _map(family, trained, grouping="roles"):
    model = build_model(family, generator=torch.Generator().manual_seed(0))
    adapter = get_adapter(model)
    for info in adapter.moe_layers(model):
        if info.index not in trained:
            info.experts.requires_grad_(False)
    return model, build_group_map(model, adapter.expert_params(model), trained_layers=trained, grouping=grouping)


def test_fused_experts_are_sliced_per_expert():
    model, gmap = _map("olmoe", [1])
    assert gmap.keys[0] == GroupKey.shared()
    assert [k for k in gmap.keys if k.is_expert] == [GroupKey.expert(1, e) for e in range(4)]
    name = "model.layers.1.mlp.experts.gate_up_proj"
    assert ParamSlice(name, 2) in gmap.groups[GroupKey.expert(1, 2)]
    assert gmap.group_of(name, 2) == GroupKey.expert(1, 2)
    assert gmap.is_sliced(name)
    assert gmap.group_of("model.layers.1.mlp.gate.weight") == GroupKey.shared()  # router is shared
    assert "model.layers.0.mlp.experts.gate_up_proj" not in gmap.params  # frozen
    sizes = gmap.summary()
    experts = model.model.layers[1].mlp.experts
    assert sizes["expert/1/0"] == experts.gate_up_proj[0].numel() + experts.down_proj[0].numel()


def test_switch_experts_and_shared_experts():
    _, gmap = _map("switch_transformers", [0, 1])
    names = [s.name for s in gmap.groups[GroupKey.expert(0, 3)]]
    assert names == [f"switch.encoder.block.0.layer.1.mlp.experts.expert_3.{w}.weight" for w in ("wi", "wo")]
    _, gmap = _map("deepseek_v3", [1])
    assert gmap.group_of("model.layers.1.mlp.shared_experts.gate_proj.weight") == GroupKey.shared()


def test_dense_is_one_group_and_untrained_trainable_experts_raise():
    _, gmap = _map("mixtral", [0, 1], grouping="dense")
    assert gmap.keys == (GroupKey.dense(),)
    model = build_model("mixtral")
    adapter = get_adapter(model)
    with pytest.raises(ConfigError, match="not in trained_layers"):
        build_group_map(model, adapter.expert_params(model), trained_layers=[1], grouping="roles")
    with pytest.raises(ConfigError, match="not an MoE layer"):
        build_group_map(model, adapter.expert_params(model), trained_layers=[7], grouping="roles")
    with pytest.raises(ConfigError, match="grouping"):
        build_group_map(model, adapter.expert_params(model), trained_layers=[1], grouping="mixed")
