"""The reference's protocol controls (issue 22): a frozen head, LoRA for every roles-built method,
``dpsgd-full``, ``layers="last"``, group-wise shared clipping (``shared_split="head"``) and the
``paper`` recipe. Each fast path is checked against the one-record-at-a-time oracle."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from tiny_records import DATA

from raptor.errors import ConfigError
from raptor.moe.models import TinySize, build_model
from raptor.per_sample.reference import reference_compute
from raptor.recipes import RECIPES, reference_recipe, tiny_recipe
from raptor.training.config import PrivacyConfig, TrainConfig
from raptor.training.run.assemble import build_trainer
from raptor.training.setup.trainable import head_param_names

FIXED = PrivacyConfig(epsilon=None, noise_multipliers=(1.0, 1.0), secure_rng=False)


def _model(family="switch_transformers", experts=4, top_k=1):
    return build_model(family, generator=torch.Generator().manual_seed(5),
                       size=TinySize(num_experts=experts, top_k=top_k), num_labels=2)


def _trainer(method, *, family="switch_transformers", privacy=FIXED, steps=2, top_k=1, **cfg):
    config = tiny_recipe(method, steps=steps, batch_size=8, privacy=privacy, **cfg)
    return build_trainer(config, _model(family, top_k=top_k), train=DATA["train"], validation=DATA["validation"],
                         public=DATA["public"])


def _head_values(model):
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return {n: p.detach().clone() for n, p in base.named_parameters() if n.split(".")[0] in ("classifier", "score")}


@pytest.mark.parametrize("lora", [False, True])
@pytest.mark.parametrize("method", ["raptor", "dpsgd", "dpsgd-full", "shared-only", "dp-lora"])
def test_frozen_head_is_in_no_group_and_never_updated(method, lora):
    if method == "dp-lora" and not lora:
        lora = False  # dp-lora is LoRA by definition; the flag is not needed
    tr = _trainer(method, lora=lora, freeze_head=True, layers="last")
    before = _head_values(tr.model)
    assert before, "the tiny model has a head"
    grouped = {s.name for slices in tr.engine.group_map.groups.values() for s in slices}
    assert not any(".classifier." in f".{n}" or n.startswith("classifier") for n in grouped)
    assert head_param_names(tr.model) == ()
    res = tr.fit(progress=False)
    assert res["steps"] == 2 and 0 < res["epsilon"] < math.inf
    after = _head_values(tr.model)
    assert all(torch.equal(before[n], after[n]) for n in before)


def test_head_moves_when_not_frozen():
    """The control of the test above: the same run with the head trainable changes the head."""
    tr = _trainer("raptor", lora=True, freeze_head=False, layers="last")
    before = _head_values(tr.model)
    tr.fit(progress=False)
    after = _head_values(tr.model)
    assert any(not torch.equal(before[n], after[n]) for n in before)


def _trainable(tr):
    return sorted(n for n, p in tr.model.named_parameters() if p.requires_grad)


@pytest.mark.parametrize("family", ["switch_transformers", "olmoe"])
def test_lora_keeps_dpsgd_matched_to_raptor(family):
    """Under LoRA, dpsgd trains exactly RAPTOR's parameters (one clip instead of roles)."""
    raptor = _trainer("raptor", family=family, lora=True, freeze_head=True, layers="last")
    dpsgd = _trainer("dpsgd", family=family, lora=True, freeze_head=True, layers="last")
    assert _trainable(raptor) == _trainable(dpsgd)
    names = _trainable(raptor)
    assert names and all("lora" in n for n in names)  # adapters only: base weights, routers, head frozen
    experts = [n for n in names if ".experts" in n or "expert_" in n]
    assert experts, "the trained layer's experts carry LoRA"
    last = raptor.plan.trained_layers
    assert len(last) == 1 and last[0] == max(raptor.engine.group_map.groups and
                                             [info.index for info in raptor.engine.layers])
    keys = [str(k) for k, v in raptor.engine.group_map.groups.items() if v]
    assert "shared" in keys and any(k.startswith(f"expert/{last[0]}/") for k in keys)


@pytest.mark.parametrize("lora", [False, True])
def test_dpsgd_full_trains_every_layers_experts(lora):
    full = _trainer("dpsgd-full", lora=lora, freeze_head=lora)
    dpsgd = _trainer("dpsgd", lora=lora, freeze_head=lora, layers="last")
    layers = [info.index for info in full.engine.layers]
    assert list(full.plan.trained_layers) == layers and len(layers) > 1
    for tr, expected in ((full, set(layers)), (dpsgd, {layers[-1]})):
        with_grad = set()
        for info in tr.engine.layers:
            prefix = f"{info.name}.{info.experts_attr}"
            if any(prefix in n and p.requires_grad for n, p in tr.model.named_parameters()):
                with_grad.add(info.index)
        assert with_grad == expected
    assert [str(k) for k in full.engine.group_map.groups] == ["dense"]


@pytest.mark.parametrize("family,top_k", [("switch_transformers", 1), ("olmoe", 2), ("mixtral", 2)])
@pytest.mark.parametrize("split", ["none", "head"])
def test_engine_matches_one_record_loop_under_the_protocol(family, top_k, split):
    """Per-record norms and clipped sums of raptor with LoRA (and the split shared stream) equal
    a one-record-at-a-time plain-autograd loop."""
    privacy = replace(FIXED, shared_split=split)
    tr = _trainer("raptor", family=family, top_k=top_k, privacy=privacy, lora=True,
                  freeze_head=split == "none", layers="last")
    engine = tr.engine
    batch = {k: v[:6] for k, v in DATA["train"].items()}
    clips = {k: 0.5 * c for k, c in tr.plan.clip_norms.items()}  # binding clips
    got = engine.compute(batch, clips)
    ref = reference_compute(tr.model, batch, clips, tr.plan.trained_layers, "roles",
                            head_params=head_param_names(tr.model) if split == "head" else ())
    assert set(got.norms) == set(ref.norms)
    if split == "head":
        assert any(str(k) == "head" for k in got.norms)
    for k in ref.norms:
        torch.testing.assert_close(got.norms[k].double(), ref.norms[k].double(), rtol=1e-4, atol=1e-6)
    for name, value in ref.clipped_sums.items():
        torch.testing.assert_close(got.clipped_sums[name].double(), value.double(), rtol=1e-4, atol=1e-6)


def test_split_shared_stream_is_one_gaussian_with_the_same_budget():
    plain = _trainer("raptor", privacy=PrivacyConfig(epsilon=4.0, secure_rng=False), lora=True, layers="last")
    split = _trainer("raptor", privacy=PrivacyConfig(epsilon=4.0, secure_rng=False, shared_split="head"), lora=True,
                     layers="last")
    sigma_s = split.plan.sigmas["shared"]
    assert sigma_s == pytest.approx(plain.plan.sigmas["shared"])
    shared = {str(g.key): g for g in split.plan.groups if g.stream == "shared"}
    assert set(shared) == {"shared", "head"}
    for g in shared.values():
        assert g.sigma == pytest.approx(sigma_s * math.sqrt(2))
    # the stream's total sensitivity stays C_s, each part at its public median scale
    total = math.sqrt(sum(g.clip_norm ** 2 for g in shared.values()))
    assert total == pytest.approx(1.0)
    assert shared["head"].clip_norm != pytest.approx(shared["shared"].clip_norm)
    eps = [t.fit(progress=False)["epsilon"] for t in (plain, split)]
    assert eps[0] == pytest.approx(eps[1], rel=1e-9) and eps[1] <= 4.0


def test_split_refusals():
    with pytest.raises(ConfigError, match="privacy.shared_split=head"):
        _trainer("dpsgd", privacy=replace(FIXED, shared_split="head"))
    with pytest.raises(ConfigError, match="head is not trained"):
        _trainer("raptor", privacy=replace(FIXED, shared_split="head"), freeze_head=True)
    with pytest.raises(ConfigError, match="shared_split"):
        PrivacyConfig(shared_split="attention")


def test_config_validation():
    with pytest.raises(ConfigError, match="lora"):
        TrainConfig(lora="yes")
    with pytest.raises(ConfigError, match="last-layer"):
        TrainConfig(method="last-layer", lora=True)
    assert TrainConfig(layers="last").layers == "last"
    with pytest.raises(ConfigError, match="layers"):
        TrainConfig(layers="first")


def test_paper_recipe():
    cfg = reference_recipe()
    assert RECIPES["paper"] is reference_recipe
    assert (cfg.freeze_head, cfg.lora, cfg.layers, cfg.batch_size, cfg.optim.lr, cfg.epochs) == \
        (True, True, "last", 1024, 2e-4, 3.0)
    assert (cfg.privacy.clip_shared, cfg.privacy.clip_expert, cfg.privacy.shared_ratio) == (1.0, 1.0, 0.3)
    assert reference_recipe("dp-lora").lora is False and reference_recipe("nonprivate").privacy.epsilon is None
    assert reference_recipe("dpsgd-full").lora is True


def test_lora_on_one_layer_leaves_the_others_plain():
    """Fused families: expert LoRA on the last layer only; the other layers' forward is unchanged."""
    model = _model("olmoe")
    x = DATA["train"]["input_ids"][:2]
    with torch.no_grad():
        before = model(input_ids=x).logits
    from raptor.moe.adapters import get_adapter
    from raptor.moe.expert_lora import add_expert_lora

    last = get_adapter(model).moe_layers(model)[-1].index
    add_expert_lora(model, rank=2, alpha=4.0, generator=torch.Generator().manual_seed(0), layers=[last])
    with torch.no_grad():
        after = model(input_ids=x).logits  # B = 0: the adapted model equals the base model
    torch.testing.assert_close(before, after)
